// bench_dashboard: how fast `hippo dashboard` serves a large study, in a real browser.
//
//   bench_dashboard make-plan FILE [--trials N]   a finished study of N trials (default 10,000)
//                                                  written through the plan API: multistep
//                                                  learning rates that share their first epochs,
//                                                  10 evaluations each, an execution per stage
//   bench_dashboard load FILE [--reps R]           starts `hippo dashboard` on FILE and loads
//                                                  each page of study 1 R times in chromium
//
// `load` prints, per page: the bytes served, the server's time to answer (first and later
// requests: the first one renders, later ones come from the cache), and the browser's time from
// navigation to the load event (median and range over the repetitions).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "stagetree/tree.h"
#include "storage/plan.h"
#include "tests/dashboard/browser.h"

namespace {

using namespace hippo;
using Clock = std::chrono::steady_clock;

constexpr int64_t kEpoch = 100;  // steps
constexpr int64_t kLength = 20 * kEpoch;

// A made-up accuracy that depends only on the learning rates trained so far, so that trials that
// share a prefix share its evaluations (as real ones do).
double accuracy(const Sequence& lr, int64_t step) {
  double sum = 0;
  for (int64_t s = 0; s < step; s += 10) sum += lr.value_at(s) * 10;
  return 0.9 - 0.6 / (1 + sum);
}

void make_plan(const std::string& file, int64_t trials) {
  std::filesystem::remove(file);
  SearchPlan plan = SearchPlan::open(file);
  StageTree tree;
  auto started = Clock::now();
  plan.transaction([&] {
    nlohmann::json spec = {
        {"name", "big"},
        {"searcher", {{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}}}};
    int64_t study = plan.create_study("big", spec, Policy::kShared);
    for (TrialId id = 0; id < trials; ++id) {
      double init = 0.01 * static_cast<double>(1 + id % 10);
      int64_t milestone = (2 + (id / 10) % 10) * kEpoch;
      double gamma = 0.01 + 0.0098 * static_cast<double>(id / 100);
      Sequence lr = multistep(init, {milestone}, gamma);
      TrialRow row;
      row.id = id;
      row.study_id = study;
      row.root_key = "big";
      row.params = {{"lr.init", init}, {"lr.milestone", milestone / kEpoch}, {"lr.gamma", gamma}};
      row.hyperparams = {{"lr", lr}};
      row.length = kLength;
      row.status = TrialStatus::kDone;
      row.end_reason = "trained to its length";
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(id, "big", row.hyperparams, kLength));
      std::vector<int64_t> evals;
      for (int64_t s = 2 * kEpoch; s <= kLength; s += 2 * kEpoch) {
        evals.push_back(s);
        double a = accuracy(lr, s);
        plan.add_metric({id, s, "accuracy", a});
        plan.add_metric({id, s, "loss", 2 * (1 - a)});
      }
      plan.add_eval_requests(id, evals);
    }
    // Everything trained, each stage once, on four workers one after the other.
    double clock[4] = {1.7e9, 1.7e9, 1.7e9, 1.7e9};
    for (const Stage& s : tree.stages()) {
      tree.mark_trained(s.id, s.end);
      plan.save_stage(tree.stage(s.id));
      int w = static_cast<int>(s.id % 4);
      ExecutionRow e;
      e.stage = s.id;
      e.trial = s.representative;
      e.from = s.start;
      e.to = e.reached = s.end;
      e.worker = "worker-" + std::to_string(w);
      e.started_at = clock[w];
      e.ended_at = clock[w] += 0.001 * static_cast<double>(s.steps());
      e.studies = {study};
      plan.add_execution(e);
    }
    plan.set_study_status(study, StudyStatus::kDone);
  });
  std::printf("wrote %s: %lld trials, %zu stages, in %.1f s\n", file.c_str(),
              static_cast<long long>(trials), tree.stages().size(),
              std::chrono::duration<double>(Clock::now() - started).count());
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

std::string spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "median %.3f s (%.3f .. %.3f)", v[v.size() / 2], v.front(),
                v.back());
  return buf;
}

void load(const std::string& db, int reps) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("bench-dashboard-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto started = Clock::now();
  Dashboard dashboard(db, dir + "/dashboard.log");
  std::printf("dashboard up (plan read once) in %.2f s\n",
              std::chrono::duration<double>(Clock::now() - started).count());
  testing::Browser browser(dir + "/profile");
  for (const std::string path : {"/", "/study/1", "/study/1/tree", "/study/1/timeline"}) {
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
        "%s: %.1f KiB; server first %.3f s, then %s\n  browser: received %s\n"
        "           parsed   %s\n           loaded   %s\n",
        path.c_str(), static_cast<double>(bytes) / 1024, first, spread(server).c_str(),
        spread(received).c_str(), spread(parsed).c_str(), spread(loaded).c_str());
  }
  std::filesystem::remove_all(dir);
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
