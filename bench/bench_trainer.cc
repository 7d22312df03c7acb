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
// With --input-mb N it measures instead what handing a trainer its parent's checked bytes costs
// (worker/trainer_files.h), for a file of N MiB, page cache warm: the worker's check through the
// descriptor the trainer then reads (the anchor: one hashing read, what the check cost before),
// the private sealed copy (a file that others may write), and the trainer's own read of either.
//
//   bench_trainer --stages 10 -- /usr/bin/python3 examples/pytorch/fashion_mnist.py
//   bench_trainer --input-mb 256
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol/clock.h"
#include "protocol/content_hash.h"
#include "worker/external_trainer.h"
#include "worker/trainer_files.h"

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
  hooks.checkpoint = [](int64_t, const hippo::worker::WrittenFile&) {};
  hooks.tick = [](int64_t) { return true; };
  auto started = Clock::now();
  std::vector<int64_t> held = chain.trainer.held();
  if (!chain.trainer.run(job, dir, hooks, held)) throw std::runtime_error("abandoned");
  double s = seconds_since(started);
  if (!job.snapshots.empty()) chain.step = job.to;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The parent's hand-over, for a file of `mb` MiB in `dir`: 7 rounds, the two ways interleaved.
int input_cost(int64_t mb, const std::string& dir) {
  const std::string path = dir + "/parent.ckpt";
  std::string bytes(static_cast<size_t>(mb) << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 2654435761u >> 24);
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string hash = hippo::protocol::content_hash(bytes);
  bytes = {};
  auto read_view = [](const std::string& view) {
    std::ifstream in(view, std::ios::binary);
    std::vector<char> buffer(size_t{1} << 20);
    while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()))) {
    }
  };
  std::vector<double> check, copy, read_checked, read_copy;
  for (int round = 0; round < 7; ++round) {
    for (bool copied : {false, true}) {
      auto started = Clock::now();
      hippo::worker::VerifiedInput input(path, hash, copied);
      (copied ? copy : check).push_back(seconds_since(started));
      started = Clock::now();
      read_view(input.path());
      (copied ? read_copy : read_checked).push_back(seconds_since(started));
    }
  }
  auto round = [](double x) { return std::round(x * 1e4) / 1e4; };
  std::printf("%s\n", json{{"input_mb", mb},
                           {"checked_descriptor_s", round(median(check))},
                           {"private_copy_s", round(median(copy))},
                           {"copy_over_descriptor", round(median(copy) / median(check))},
                           {"trainer_read_descriptor_s", round(median(read_checked))},
                           {"trainer_read_copy_s", round(median(read_copy))}}
                          .dump()
                          .c_str());
  return 0;
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
  int64_t input_mb = 0;
  app.add_option("--stages", stages, "stages per mode (>= 3)")->check(CLI::Range(3, 10000));
  app.add_option("--long", long_steps, "steps of the stage that times a step")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--dir", dir, "checkpoint directory (emptied)");
  app.add_option("--input-mb", input_mb,
                 "measure handing a parent checkpoint of this many MiB to a trainer instead")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("command", command, "the trainer command");
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (input_mb > 0) {
    const int status = input_cost(input_mb, dir);
    std::filesystem::remove_all(dir);
    return status;
  }
  if (command.empty()) {
    std::fprintf(stderr, "bench_trainer: give the trainer command (or --input-mb)\n");
    return 2;
  }
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
