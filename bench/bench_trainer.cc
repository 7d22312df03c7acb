// bench_trainer: what a stage costs an external trainer beyond its training: starting the process
// (a one-shot trainer, every stage), handing the stage over (a JSON line, restoring the parent
// state) and writing the checkpoint (temporary file, fsync, rename, announcement). It drives the
// worker's own ExternalTrainer (worker/external_trainer.h) without a master: a chain of 1-step
// stages, each from the previous stage's checkpoint and writing its own, run by the command as a
// one-shot trainer and as a long-lived one, and a long-lived chain whose stages write no
// checkpoint (the hand-over alone); the three are interleaved stage by stage, so that the
// machine's load hits them alike. Prints one JSON line per mode: the first stage, then the
// median, min and max of the others (seconds), and the training time of a step (from a stage of
// 1 + --long steps against one of 1), which the overhead excludes.
//
//   bench_trainer --stages 10 -- /usr/bin/python3 examples/pytorch/fashion_mnist.py
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol/clock.h"
#include "worker/external_trainer.h"

namespace {

using hippo::Clock;
using hippo::seconds_since;
using hippo::protocol::Job;
using hippo::worker::ExternalTrainer;
using hippo::worker::TrainerHooks;
using nlohmann::json;

struct Chain {
  std::string mode;
  ExternalTrainer trainer;
  bool long_lived = false;
  bool checkpoints = true;  // false: every stage after the first forks from the first's state
  int64_t base = 0;         // state ids (and file names) of this chain: base + step
  int64_t step = 0;         // the state the chain has reached (its checkpoint)
  std::vector<double> seconds;
};

// The stage [from, from + steps) of the chain, from its checkpoint at `from`.
Job stage(const Chain& chain, const json& model, int64_t steps, int64_t id) {
  Job job;
  job.id = id;
  job.run.model = model;
  job.run.model["long_lived"] = chain.long_lived;
  job.run.data = "fashion-mnist";
  job.run.train_samples = 1024;
  job.run.eval_samples = 100;
  job.run.seed = 0;
  job.run.fixed = {{"net", "mlp"}, {"hidden", {64}}, {"batch_size", 32}, {"momentum", 0.9}};
  job.hyperparams["lr"] = hippo::Sequence::constant(0.05);
  job.from = chain.step;
  job.to = chain.step + steps;
  const int64_t base = chain.base;
  if (job.from > 0) {
    job.parent_state = base + job.from;
    job.parent_file = "state-" + std::to_string(base + job.from) + ".ckpt";
  }
  if (chain.checkpoints || job.from == 0)
    job.snapshots = {{job.to, base + job.to, "state-" + std::to_string(base + job.to) + ".ckpt"}};
  return job;
}

double run(Chain& chain, const json& model, int64_t steps, const std::string& dir) {
  static int64_t id = 0;
  Job job = stage(chain, model, steps, ++id);
  TrainerHooks hooks;
  hooks.metrics = [](int64_t, const json&) {};
  hooks.checkpoint = [](int64_t) {};
  hooks.tick = [](int64_t) { return true; };
  auto started = Clock::now();
  std::vector<int64_t> held = chain.trainer.held();
  if (!chain.trainer.run(job, dir, hooks, held)) throw std::runtime_error("abandoned");
  double s = seconds_since(started);
  if (!job.snapshots.empty()) chain.step = job.to;
  return s;
}

json summary(const std::vector<double>& seconds) {
  std::vector<double> rest(seconds.begin() + 1, seconds.end());
  std::sort(rest.begin(), rest.end());
  auto round = [](double x) { return std::round(x * 1e4) / 1e4; };
  return {{"first_s", round(seconds.front())},
          {"median_s", round(rest[rest.size() / 2])},
          {"min_s", round(rest.front())},
          {"max_s", round(rest.back())}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_trainer: the per-stage cost of an external trainer, one-shot and long-lived"};
  int stages = 10;
  int64_t long_steps = 200;
  std::string dir = "bench-trainer-ckpt";
  std::vector<std::string> command;
  app.add_option("--stages", stages, "stages per mode (>= 3)")->check(CLI::Range(3, 10000));
  app.add_option("--long", long_steps, "steps of the stage that times a step")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--dir", dir, "checkpoint directory (emptied)");
  app.add_option("command", command, "the trainer command")->required();
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const json model = {{"type", "external"}, {"command", command}};
  try {
    // Long-lived without checkpoints: each stage after the first forks from the first's state
    // (in the trainer's memory) and writes nothing: the hand-over alone.
    Chain one_shot, long_lived, handover;
    one_shot.mode = "one-shot";
    long_lived.mode = "long-lived";
    handover.mode = "long-lived, no checkpoint";
    long_lived.long_lived = handover.long_lived = true;
    long_lived.base = 1'000'000;
    handover.base = 2'000'000;
    handover.checkpoints = false;
    for (int i = 0; i < stages; ++i)
      for (Chain* chain : {&one_shot, &long_lived, &handover})
        chain->seconds.push_back(run(*chain, model, 1, dir));
    // A step's training time: a long stage against the short ones, on the long-lived trainer.
    double long_stage = run(long_lived, model, 1 + long_steps, dir);
    std::vector<double> later(long_lived.seconds.begin() + 1, long_lived.seconds.end());
    std::sort(later.begin(), later.end());
    const double step_s = (long_stage - later[later.size() / 2]) / double(long_steps);
    for (Chain* chain : {&one_shot, &long_lived, &handover}) {
      json line = summary(chain->seconds);
      line["mode"] = chain->mode;
      line["stages"] = stages;
      line["step_s"] = std::round(step_s * 1e6) / 1e6;
      line["overhead_median_s"] = std::round((line["median_s"].get<double>() - step_s) * 1e4) / 1e4;
      std::printf("%s\n", line.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_trainer: %s\n", e.what());
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
