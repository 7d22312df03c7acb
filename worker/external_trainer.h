// External trainers: a user's command (`model.type: external`, `command`: argv) that trains a stage
// in place of the built-in engine, so that users bring their own models. The worker runs the
// command (fork/exec, no shell) once per stage, writes the stage to its stdin as one JSON line,
// and reads JSON lines from its stdout: metrics, written checkpoints, progress, and a final done
// line. The protocol is worker/README.md's ("External trainers").
//
// Every way a trainer can go wrong (it cannot be started, a malformed or unexpected line, a
// metric for a step that was not asked for, a missing output checkpoint, no done line, a non-zero
// exit, silence beyond the timeout) is a TrainerError that names the problem and ends with the
// last lines the trainer wrote to stderr; the trainer (its whole process group) is killed first.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "protocol/message.h"

namespace hippo::worker {

struct TrainerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The stage as the trainer reads it: model (with its command), data, seed, fixed settings, the
// step range, the input checkpoint path (null at a root), the output checkpoints with their
// steps, the evaluation steps, and every hyper-parameter as its sequence (canonical segments) and
// as its value at each step of [from, to). Checkpoint paths are the job's file names joined with
// checkpoint_dir (made absolute, so the trainer may change directory).
nlohmann::json trainer_input(const protocol::Job& job, const std::string& checkpoint_dir);

// One line of the trainer's output.
struct TrainerLine {
  enum class Kind { kMetric, kCheckpoint, kProgress, kDone };
  Kind kind = Kind::kDone;
  int64_t step = 0;  // metric, checkpoint, progress
  std::string metric;
  double value = 0;
};
// {"step": S, "metric": NAME, "value": X}, {"checkpoint": S}, {"step": S} or {"done": true};
// anything else throws TrainerError naming the problem.
TrainerLine parse_trainer_line(std::string_view line);

struct TrainerHooks {
  // All metrics of one evaluation step, {"name": value, ...}, once the trainer has moved past it.
  std::function<void(int64_t step, const nlohmann::json& metrics)> metrics;
  // The checkpoint ordered for `step` is written (the file exists).
  std::function<void(int64_t step)> checkpoint;
  // Called at least every tick_ms with the latest step the trainer reported; returning false
  // abandons the stage (the trainer is killed). Heartbeats and the master's orders go here.
  std::function<bool(int64_t step)> tick;
  int tick_ms = 1000;
  double timeout_s = 3600;  // the longest the trainer may go without a line on stdout
};

// Runs job.run.model["command"] on the stage. Returns true when the trainer ended the stage as the
// protocol says (every evaluation reported, every checkpoint written, a done line, exit status 0),
// false when tick() abandoned it. Throws TrainerError otherwise.
bool run_external_trainer(const protocol::Job& job, const std::string& checkpoint_dir,
                          const TrainerHooks& hooks);

}  // namespace hippo::worker
