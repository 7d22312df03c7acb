// `hippo dashboard`: the web UI over the search plan (dashboard/server.h), read-only; and `hippo
// report STUDY -o FILE.html`: the same figures in one self-contained file.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "dashboard/model.h"
#include "dashboard/pages.h"
#include "dashboard/server.h"
#include "master/cli/cli.h"

namespace hippo::cli {
namespace {

struct DashboardArgs {
  std::string bind = "127.0.0.1:8080";
  bool expose = false;
  double refresh_s = 1.0;
};

// "HOST:PORT" or "[IPv6]:PORT".
std::pair<std::string, int> host_and_port(const std::string& bind) {
  size_t colon = bind.rfind(':');
  if (colon == std::string::npos || colon + 1 == bind.size())
    throw BadInput("--bind " + bind + ": expected HOST:PORT, e.g. 127.0.0.1:8080");
  std::string host = bind.substr(0, colon), port_text = bind.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos)
    throw BadInput("--bind " + bind + ": expected HOST:PORT, e.g. 127.0.0.1:8080");
  int port = std::stoi(port_text);
  if (port > 65535) throw BadInput("--bind " + bind + ": port " + port_text + " > 65535");
  return {host, port};
}

int dashboard(const DashboardArgs& args, const GlobalOptions& global) {
  auto [host, port] = host_and_port(args.bind);
  const bool loopback = dashboard::is_loopback(host);
  if (!loopback && !args.expose)
    throw BadInput("--bind " + args.bind +
                   " is not a loopback address: the dashboard would show this search plan to "
                   "anyone who reaches it, without authentication; add --expose if you mean it");
  if (args.refresh_s < 0.05 || args.refresh_s > 3600)
    throw BadInput("--refresh: expected 0.05 to 3600 seconds");
  require_plan(global.db);
  dashboard::ServerOptions options;
  options.host = host;
  options.port = port;
  options.refresh_s = args.refresh_s;
  // SIGINT and SIGTERM go to one thread that stops the server (blocked before any other thread
  // starts, so every thread inherits the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::unique_ptr<dashboard::Server> server;
  try {
    server = std::make_unique<dashboard::Server>(global.db, options);
    server->bind();
  } catch (const std::runtime_error& e) {
    throw BadInput(e.what());
  }
  std::string url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                    ":" + std::to_string(server->port()) + "/";
  // The first line on stdout is the address, at once (with --bind HOST:0 the port is known only
  // now); everything else goes to stderr.
  std::printf("%s\n", url.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "hippo dashboard: %s read-only at %s (Ctrl-C stops)\n", global.db.c_str(),
               url.c_str());
  if (!loopback)
    std::fprintf(stderr,
                 "hippo dashboard: --expose: anyone who can reach %s can read every study in %s "
                 "(names, specs, parameters, metrics, stage trees, worker names and times), "
                 "without authentication\n",
                 url.c_str(), global.db.c_str());
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server->stop();
  });
  server->run();
  // run() returned: stopped by a signal (the stopper is done), or the socket failed.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  return 0;
}

struct ReportArgs {
  std::string study, out, mode;  // mode: octal text, "" for the plan's
};

// The permission bits `hippo report` writes with: --mode's, or the plan's own (0600, or 0640 in
// a group's setgid directory): a report holds what the plan holds, and is as private.
mode_t report_mode(const ReportArgs& args, const std::string& db) {
  if (!args.mode.empty()) {
    if (args.mode.size() > 4 || args.mode.find_first_not_of("01234567") != std::string::npos)
      throw BadInput("--mode " + args.mode + ": expected octal permission bits, e.g. 0644");
    const mode_t mode = static_cast<mode_t>(std::stoul(args.mode, nullptr, 8));
    if (mode & ~0666)
      throw BadInput("--mode " + args.mode +
                     ": a report is not executable nor setuid (at most 0666)");
    return mode;
  }
  struct stat plan {};
  if (::stat(db.c_str(), &plan) != 0) throw BadInput("cannot stat " + db);
  return plan.st_mode & 0666;
}

int report(const ReportArgs& args, const GlobalOptions& global) {
  require_plan(global.db);
  const mode_t mode = report_mode(args, global.db);
  std::string html;
  try {
    SearchPlan plan = SearchPlan::open_read_only(global.db);
    dashboard::PlanView view = dashboard::read_plan(
        plan,
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
        args.study);
    auto study = view.find(args.study);
    if (!study) throw BadInput("no study named " + args.study + " in " + global.db);
    html = dashboard::report(*study);
  } catch (const BadInput&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw BadInput(e.what());
  }
  // Written whole or not at all: a new temporary file (never one that is there, nor a link's
  // target) with the report's mode whatever the umask, renamed over the target.
  const std::string& out = args.out;
  const std::string temporary = out + ".tmp";
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw BadInput("cannot write " + temporary + ": " + std::strerror(errno));
  bool ok = ::fchmod(fd, mode) == 0;
  for (size_t done = 0; ok && done < html.size();) {
    const ssize_t n = ::write(fd, html.data() + done, html.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(temporary, out, ec);
  if (!ok || ec) {
    std::filesystem::remove(temporary, ec);
    throw BadInput("cannot write " + out);
  }
  std::fprintf(stderr, "wrote %s (%zu bytes, self-contained, mode %04o)\n", out.c_str(),
               html.size(), static_cast<unsigned>(mode));
  return 0;
}

}  // namespace

void add_dashboard_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "dashboard", "a read-only web UI over the search plan that updates while studies run");
  cmd->fallthrough();
  auto args = std::make_shared<DashboardArgs>();
  cmd->add_option("--bind", args->bind, "HOST:PORT to listen on (default 127.0.0.1:8080)");
  cmd->add_flag("--expose", args->expose,
                "allow a --bind that is not loopback (anyone who reaches it reads the plan)");
  cmd->add_option("--refresh", args->refresh_s,
                  "re-read a changed plan at most every this many seconds (default 1)");
  // Its address on stdout, its log on stderr.
  set_action(cmd, action, {Format::kTable}, [args, &global] { return dashboard(*args, global); });

  CLI::App* rep =
      app.add_subcommand("report", "one self-contained HTML file with a study's figures");
  rep->fallthrough();
  auto report_args = std::make_shared<ReportArgs>();
  add_study_argument(rep, &report_args->study);
  rep->add_option("-o,--output", report_args->out, "the HTML file to write")->required();
  rep->add_option("--mode", report_args->mode,
                  "the file's permission bits in octal (default: the plan's, e.g. 0600)");
  set_action(rep, action, {},  // the file, and a line on stderr
             [report_args, &global] { return report(*report_args, global); });
}

}  // namespace hippo::cli
