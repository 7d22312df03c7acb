// What the dashboard tests share: a search plan made by real `hippo run`s (once per test
// program), and a real `hippo dashboard` process serving it on a free loopback port.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/e2e_helper.h"

namespace hippo::testing {

namespace fs = std::filesystem;
using e2e::kExamples;
using e2e::kHippo;
using e2e::last_json;
using e2e::sh;
using nlohmann::json;

// The port of the address on the first line of a dashboard's stdout ("http://HOST:PORT/"), or 0
// while that line is not complete.
inline int announced_port(const std::string& output) {
  size_t end = output.find('\n');
  if (output.rfind("http://", 0) != 0 || end == std::string::npos || end < 2 ||
      output[end - 1] != '/')
    return 0;
  size_t colon = output.rfind(':', end);
  if (colon == std::string::npos || colon < 7) return 0;
  return std::atoi(output.substr(colon + 1, end - 1 - colon - 1).c_str());
}

// A `hippo dashboard` process, its stderr in `log` and its stdout in `log`.stdout; stopped
// (SIGTERM, then waited for) when destroyed.
class DashboardProcess {
 public:
  DashboardProcess(const std::string& db, const std::string& log,
                   const std::vector<std::string>& extra = {}) {
    log_ = log;
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen(log.c_str(), "w", stderr)) _exit(126);
      if (!freopen((log + ".stdout").c_str(), "w", stdout)) _exit(126);
      std::vector<std::string> args = {kHippo, "--db", db, "dashboard"};
      if (std::find(extra.begin(), extra.end(), "--bind") == extra.end())
        args.insert(args.end(), {"--bind", "127.0.0.1:0"});
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // The dashboard says where it listens on the first line of its stdout.
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      port_ = announced_port(output());
    }
  }
  ~DashboardProcess() { stop(); }
  // SIGTERM; the exit status (-1 if it had to be killed).
  int stop() {
    if (pid_ <= 0) return status_;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return status_ = -1;
  }
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  int port() const { return port_; }
  std::string url(const std::string& path = "/") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string log() const { return e2e::read_file(log_); }
  std::string output() const { return e2e::read_file(log_ + ".stdout"); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = -1;
  std::string log_;
};

// The plan every test reads: studies made by real runs (2 worker processes each).
struct RealPlan {
  fs::path dir;
  std::string db;
  std::map<std::string, json> runs;  // study name -> the JSON line `hippo run` printed

  // A spec from examples/fmnist-mlp-ci.json with `changes` merged in.
  std::string spec(const std::string& file_name, const std::string& name, const json& changes,
                   const std::string& example = "fmnist-mlp-ci.json") const {
    std::ifstream in(kExamples + "/" + example);
    json s = json::parse(in);
    s.merge_patch(changes);
    s["name"] = name;
    return write(file_name, s);
  }
  std::string write(const std::string& file_name, const json& spec) const {
    std::string file = (dir / file_name).string();
    std::ofstream(file) << spec.dump(2);
    return file;
  }
  void run(const std::string& spec_file, const std::string& name, const std::string& flags = "") {
    auto r = sh(kHippo + " --db " + db + " --format json run " + spec_file + " --workers 2 " +
                flags + " 2>>" + (dir / "runs.log").string());
    ASSERT_EQ(r.status, 0) << r.out;
    runs[name] = last_json(r.out);
  }

  void make(const std::string& tag) {
    dir = fs::temp_directory_path() / ("hippo-dashboard-" + tag + "-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    db = (dir / "plan.db").string();
    // Shared stages (the CI grid: 4 trials whose learning rates decay at different epochs), the
    // same grid trial-based (saving 1), an adaptive study that stops trials (ASHA), and a name
    // that would be markup if it were not escaped.
    run(spec("grid.json", "grid", json::object()), "grid");
    run(spec("trial-based.json", "grid-trial-based", json::object()), "grid-trial-based",
        "--policy trial-based");
    run(spec("asha.json", "asha", json::object(), "fmnist-mlp-asha.json"), "asha");
    // the docs/spec.md example on a prefix of the data: 18 trials, 27 stages.
    run(spec("lr-decay.json", "lr-decay",
             {{"data", {{"train_samples", 2048}, {"eval_samples", 512}}}},
             "fmnist-mlp-lr-decay.json"),
        "lr-decay");
    const std::string markup = "<img src=x onerror=alert(1)>&\"'";
    run(spec("markup.json", markup, json::object()), markup);
    // Two objectives under a constraint that some learning rates break.
    run(write("mo-smoke.json",
              json::parse(R"({"name": "mo-smoke", "model": {"type": "mlp", "hidden": [32]},
        "data": {"name": "fashion-mnist", "train_samples": 2048, "eval_samples": 512}, "seed": 1,
        "fixed": {"batch_size": 128, "optimizer": "sgd"},
        "hyperparameters": {"lr": {"loguniform": [0.001, 1.0]},
                            "momentum": {"uniform": [0.0, 0.95]}},
        "searcher": {"name": "random",
                     "objectives": [{"metric": "accuracy", "mode": "max"},
                                    {"metric": "loss", "mode": "min"}],
                     "constraints": [{"metric": "loss", "max": 1.2}], "max_trials": 8},
        "length": {"epochs": 3}, "eval": {"every": {"epochs": 1}}})")),
        "mo-smoke");
  }
};

}  // namespace hippo::testing
