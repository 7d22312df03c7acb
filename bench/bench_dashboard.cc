// bench_dashboard: how fast `hippo dashboard` serves a large study, in a real browser.
//
//   bench_dashboard make-plan FILE [--trials N]   two finished ASHA studies of N trials each
//                                                  (default 10,000), one objective and two,
//                                                  written through the plan API
//                                                  (tests/dashboard/large_plan.h)
//   bench_dashboard load FILE [--reps R]           starts `hippo dashboard` on FILE; writes each
//                                                  study's report and opens it R times offline in
//                                                  chromium; loads each page R times
//
// `load` prints the anchor (the dashboard's first read of the whole plan) and, per report, its
// size, the seconds `hippo report` took (and their ratio to the anchor), chromium's time to the
// load event and to the whole table decoded; per page: the bytes served, the server's time to
// answer (first and later requests: the first one renders, later ones come from the cache), and
// the browser's times from navigation (median and range over the repetitions); then the
// first answer after the plan changed, which re-reads it. `load` writes into FILE (one
// evaluation per repetition): run it on a copy.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "stagetree/tree.h"
#include "storage/plan.h"
#include "tests/dashboard/browser.h"
#include "tests/dashboard/large_plan.h"

namespace {

using namespace hippo;
using Clock = std::chrono::steady_clock;

// Studies of `trials` trials of one and of two objectives (tests/dashboard/large_plan.h: an ASHA
// study on 1,000 workers as the plan API writes it).
void make_plan(const std::string& file, int64_t trials) {
  std::filesystem::remove(file);
  SearchPlan plan = SearchPlan::open(file);
  for (int objectives : {1, 2}) {
    auto started = Clock::now();
    testing::LargeStudy o;
    o.trials = trials;
    o.objectives = objectives;
    const std::string name = objectives == 1 ? "big" : "big-two";
    testing::write_large_study(plan, name, o);
    std::printf("wrote %s into %s: %lld trials, in %.1f s\n", name.c_str(), file.c_str(),
                static_cast<long long>(trials),
                std::chrono::duration<double>(Clock::now() - started).count());
  }
}

struct Dashboard {
  pid_t pid = -1;
  int port = 0;
  Dashboard(const std::string& db, const std::string& log) {
    pid = fork();
    if (pid == 0) {
      if (!freopen(log.c_str(), "w", stderr)) _exit(126);
      execl(HIPPO_BINARY, HIPPO_BINARY, "--db", db.c_str(), "dashboard", "--bind", "127.0.0.1:0",
            nullptr);
      _exit(127);
    }
    const std::string announced = "read-only at http://127.0.0.1:";
    for (int i = 0; i < 1200 && port == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      size_t at = text.find(announced);
      if (at != std::string::npos) port = std::atoi(text.c_str() + at + announced.size());
    }
  }
  ~Dashboard() {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
};

// Seconds for one GET of the whole page (curl), and its size.
std::pair<double, size_t> fetch(int port, const std::string& path) {
  auto start = Clock::now();
  std::string command =
      "curl -s -o /dev/null -w '%{size_download}' http://127.0.0.1:" + std::to_string(port) + path;
  FILE* p = popen(command.c_str(), "r");
  char buf[64] = "";
  if (!fgets(buf, sizeof buf, p)) buf[0] = 0;
  pclose(p);
  return {std::chrono::duration<double>(Clock::now() - start).count(),
          static_cast<size_t>(std::atoll(buf))};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "median %.3f s (%.3f .. %.3f)", v[v.size() / 2], v.front(),
                v.back());
  return buf;
}

// Seconds a command takes.
double timed(const std::string& command) {
  auto start = Clock::now();
  if (std::system(command.c_str()) != 0) std::printf("  failed: %s\n", command.c_str());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void load(const std::string& db, int reps) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("bench-dashboard-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto started = Clock::now();
  Dashboard dashboard(db, dir + "/dashboard.log");
  // The anchor: reading the whole plan once (every study), which every later figure is against.
  const double anchor = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("dashboard up (plan read once: the anchor) in %.2f s\n", anchor);
  std::fflush(stdout);
  testing::Browser browser(dir + "/profile");
  // The report of each study: written by `hippo report`, then rendered offline by chromium (the
  // load event, and the whole table decoded from its compressed copy).
  for (const std::string study : {"1", "2"}) {
    const std::string file = dir + "/report-" + study + ".html";
    const double written = timed(std::string(HIPPO_BINARY) + " --db " + db + " report " + study +
                                 " -o " + file + " 2>/dev/null");
    std::vector<double> loaded, decoded;
    for (int i = 0; i < reps; ++i) {
      testing::Browser::Tab tab = browser.open();
      browser.go_offline(tab);
      auto t0 = Clock::now();
      browser.navigate(tab, "file://" + file);
      loaded.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      browser.wait_until(tab, "!!document.querySelector('.trial-table[data-decoded]')",
                         std::chrono::seconds(60));
      decoded.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (!browser.errors(tab).empty())
        std::printf("  console error: %s\n", browser.errors(tab)[0].c_str());
      browser.close(tab);
    }
    std::printf(
        "report of study %s: %.1f KiB written in %.2f s (%.2fx the anchor)\n  chromium: loaded "
        "%s\n            table decoded %s\n",
        study.c_str(), static_cast<double>(std::filesystem::file_size(file)) / 1024, written,
        written / anchor, spread(loaded).c_str(), spread(decoded).c_str());
  }
  for (const std::string path :
       {"/", "/study/1", "/study/2", "/study/1/tree", "/study/1/timeline"}) {
    auto [first, bytes] = fetch(dashboard.port, path);
    std::vector<double> server, received, parsed, loaded;
    for (int i = 0; i < reps; ++i) server.push_back(fetch(dashboard.port, path).first);
    for (int i = 0; i < reps; ++i) {
      testing::Browser::Tab tab = browser.open();
      browser.navigate(tab, "http://127.0.0.1:" + std::to_string(dashboard.port) + path);
      // By the page's own clock, from the start of the navigation: the last byte received, the
      // document parsed (the script has run: the table is drawn), the load event done.
      nlohmann::json t = browser.evaluate(
          tab,
          "(() => { const n = performance.getEntriesByType('navigation')[0];"
          " return [n.responseEnd - n.startTime, n.domContentLoadedEventEnd - n.startTime,"
          " n.loadEventEnd - n.startTime]; })()");
      if (!browser.errors(tab).empty())
        std::printf("  console error: %s\n", browser.errors(tab)[0].c_str());
      received.push_back(t[0].get<double>() / 1000);
      parsed.push_back(t[1].get<double>() / 1000);
      loaded.push_back(t[2].get<double>() / 1000);
      browser.close(tab);
    }
    std::printf(
        "%s: %.1f KiB; server first %.3f s (%.2fx the anchor), then %s\n  browser: received "
        "%s\n           parsed   %s\n           loaded   %s\n",
        path.c_str(), static_cast<double>(bytes) / 1024, first, first / anchor,
        spread(server).c_str(), spread(received).c_str(), spread(parsed).c_str(),
        spread(loaded).c_str());
  }
  // The plan changes (one more evaluation of study 1's first trial): the request that finds the
  // change re-reads the plan (parsing only what is new: SearchPlan::trials' `parsed`) and renders.
  std::vector<double> reread;
  for (int i = 0; i < reps; ++i) {
    {
      SearchPlan writer = SearchPlan::open(db);
      const TrialRow first = writer.trials(1).at(0);
      writer.add_metric({first.id, first.length + 1 + i, "bench_change", 1.0});
    }
    // Past the server's --refresh, and past its pause after the last read (as long as it took).
    std::this_thread::sleep_for(std::chrono::duration<double>(1.2 + (i ? reread.back() : 0)));
    reread.push_back(fetch(dashboard.port, "/study/1").first);
    // The peer did the work: the page answered holds the new evaluation (the table's column).
    const std::string check = "curl -s http://127.0.0.1:" + std::to_string(dashboard.port) +
                              "/study/1 | grep -q bench_change";
    if (std::system(check.c_str()) != 0) {
      std::printf("the answer after the change did not show it: no re-read figure\n");
      std::exit(1);
    }
  }
  std::printf("/study/1 after the plan changed (re-read and rendered): %s (%.2fx the anchor)\n",
              spread(reread).c_str(), median(reread) / anchor);
  // Chromium may still be writing its profile: what cannot be removed now is left in /tmp.
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 2 || (args[0] != "make-plan" && args[0] != "load")) {
    std::fprintf(stderr,
                 "usage: bench_dashboard make-plan FILE [--trials N] | load FILE [--reps R]\n");
    return 2;
  }
  int64_t number = args[0] == "make-plan" ? 10000 : 5;
  if (args.size() == 4) number = std::stoll(args[3]);
  if (args[0] == "make-plan") {
    make_plan(args[1], number);
  } else {
    load(args[1], static_cast<int>(number));
  }
  return 0;
}
