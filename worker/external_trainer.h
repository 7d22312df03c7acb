// External trainers: a user's command (`model.type: external`, `command`: argv) that trains stages
// in place of the built-in engine, so that users bring their own models. The worker writes a stage
// to the trainer's stdin as one JSON line and reads JSON lines from its stdout: metrics, written
// checkpoints, progress, and a done line. A one-shot trainer is started for each stage and exits
// after it; a long-lived one (`model.long_lived: true`) is started once and kept: its stdin stays
// open and the next stage is the next line, so it pays its start (a PyTorch import) once and may
// keep states in memory, which it lists in its done line. The protocol is worker/README.md's
// ("External trainers"); the process itself is trainer_process.h's.
//
// Every way a trainer can go wrong (it cannot be started, a malformed or unexpected line, a
// metric for a step that was not asked for, a missing output checkpoint, no done line, a non-zero
// exit, silence beyond the timeout) is a TrainerError that names the problem and ends with the
// last lines the trainer wrote to stderr; the trainer (its whole process group) is killed first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/clock.h"
#include "protocol/message.h"
#include "worker/trainer_files.h"
#include "worker/trainer_process.h"

namespace hippo::worker {

// Where a worker's trainers run: its --device ("cpu", "cpu:avx2", "cuda:N") and --threads.
struct TrainerPlace {
  std::string device = "cpu";
  int threads = 1;
};

// The device the trainer names in its own process: "cuda:0" for a worker on cuda:N (the trainer
// sees that one GPU alone, as its device 0), "cpu" otherwise.
std::string trainer_device(const TrainerPlace& place);

// The environment a trainer starts in: the worker's own `parent` ("NAME=value" each), with what
// makes its results depend on the worker alone and never on how the worker was started (hippo
// run, hippo worker, a Slurm script):
//   CUDA_VISIBLE_DEVICES  the worker's GPU alone (the N-th of the worker's own visible devices
//                         when it has that variable), "" on a CPU worker: no GPU to drift onto;
//   CUBLAS_WORKSPACE_CONFIG=:4096:8 on a GPU (cuBLAS's deterministic mode; the user's own value
//                         is kept);
//   OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS = the worker's --threads (results
//                         depend on the thread count);
//   OPENBLAS_CORETYPE     removed when the worker set it for its own kernels (kernels/blas_env.h:
//                         HIPPO_SET_OPENBLAS_CORETYPE marks that), kept when the user set it.
// python/README.md says how to reproduce a trial outside hippo with the same settings.
std::vector<std::string> trainer_environment(const TrainerPlace& place,
                                             const std::vector<std::string>& parent);

// The stage as the trainer reads it: model (with its command), data (name, the sample counts
// that are known, and the spec's other data fields), seed, fixed settings, the step range, the
// input checkpoint (`input_path`, null at a root: the verified bytes of the parent's file,
// trainer_files.h), its state id and its content hash (`input_checksum`, null when unknown), the
// output checkpoints with their steps and state ids, the evaluation steps, every hyper-parameter
// as its sequence (canonical segments, stagetree/sequence_json.h: the trainer computes a step's
// value from them), the device to train on (trainer_device) and the thread count. Its size is the
// job's, never proportional to its steps: a stage of 10^9 steps is a line as short as one of 10.
// Output checkpoint paths are the job's file names joined with checkpoint_dir (made absolute, so
// the trainer may change directory). `held` (a long-lived trainer's): the states of earlier stages
// it may still use; absent for one-shot.
nlohmann::json trainer_input(const protocol::Job& job, const std::string& checkpoint_dir,
                             const std::string& input_path,
                             const std::vector<int64_t>* held = nullptr,
                             const TrainerPlace& place = {});

// One line of the trainer's output.
struct TrainerLine {
  enum class Kind { kMetric, kCheckpoint, kProgress, kDone, kDiverged };
  Kind kind = Kind::kDone;
  int64_t step = 0;  // metric, checkpoint, progress, diverged
  std::string metric;
  double value = 0;           // NaN or infinite: the model diverged
  std::string checksum;       // checkpoint: the content hash of what it wrote ("": not said)
  std::vector<int64_t> held;  // done, diverged: the states it keeps in memory
  // done, diverged: where the stage's time went, as the trainer measured it (setup, load, train,
  // eval, save), and when the process was ready for its first stage (CLOCK_MONOTONIC seconds,
  // Python's time.monotonic(); only in a process's first stage).
  protocol::JobTimes times;
  std::optional<double> ready_at;
};
// {"step": S, "metric": NAME, "value": X} (X a number, or "nan", "inf", "-inf"),
// {"checkpoint": S} (with "checksum": the content hash of the bytes it wrote, or not),
// {"step": S}, {"done": true} or {"diverged": S} (the model diverged at the
// evaluation of step S: the stage ends there), the last two optionally with "held": [state ids]
// and "times": {"setup", "load", "train", "eval", "save": seconds, "ready_at": monotonic
// seconds}, each optional; anything else throws TrainerError naming the problem.
TrainerLine parse_trainer_line(std::string_view line);

// Whether a run's trainer serves many stages (model.long_lived).
bool long_lived(const protocol::RunSpec& run);

struct TrainerHooks {
  // All metrics of one evaluation step, {"name": value, ...}, once the trainer has moved past it.
  std::function<void(int64_t step, const nlohmann::json& metrics)> metrics;
  // The checkpoint ordered for `step` is written: its file is durable, and its bytes (size and
  // content hash read through one descriptor, trainer_files.h) are those the trainer said it
  // wrote when it said so.
  std::function<void(int64_t step, const WrittenFile& file)> checkpoint;
  // Called at least every tick_ms with the latest step the trainer reported; returning false
  // abandons the stage (the trainer is killed). Heartbeats and the master's orders go here.
  std::function<bool(int64_t step)> tick;
  // The trainer reported progress to `step` (any line that moves it on); optional. A crash after
  // it costs the steps since the stage's last state: they count as executed.
  std::function<void(int64_t step)> progress;
  int tick_ms = 1000;
  double timeout_s = 3600;  // the longest the trainer may go without a line on stdout
};

// Runs the stages of external-model jobs, one at a time, and keeps a long-lived trainer between
// them: for the next stage of the same run spec (model, data, seed, fixed settings) it is reused;
// another run spec, an exit, a failure or an abandoned stage ends it (a new one starts when
// needed).
class ExternalTrainer {
 public:
  explicit ExternalTrainer(TrainerPlace place = {}) : place_(std::move(place)) {}
  // Trains the job's stage. `may_hold`: the states of earlier stages a long-lived trainer may
  // still use (the worker's view: after a master restart, none); it forgets the others. Returns
  // true when the trainer ended the stage as the protocol says (every evaluation reported, every
  // checkpoint written, a done line; a one-shot trainer also exited with status 0), false when
  // tick() abandoned it. Throws TrainerError otherwise, and TrainerFileError, before any trainer
  // starts, when the parent's file is not the state its producer wrote (job.parent_checksum).
  bool run(const protocol::Job& job, const std::string& checkpoint_dir, const TrainerHooks& hooks,
           const std::vector<int64_t>& may_hold = {});
  // Where the last stage that run() finished stopped because its model diverged (its diverged
  // line), if it did.
  std::optional<int64_t> diverged_at() const { return diverged_at_; }
  // The states the long-lived trainer said it holds in memory; empty when none is running.
  const std::vector<int64_t>& held() const { return held_; }
  // Where the last stage that run() finished spent its time: what the trainer reported, and
  // `start`, the part of its process's start (imports) that the stage waited for.
  const protocol::JobTimes& times() const { return times_; }
  // Starts the long-lived trainer of `run` before its first stage comes, when none is kept (a kept
  // one, with the states it holds, is never replaced for this); false when it started none.
  bool prepare(const protocol::RunSpec& run);
  // The pid of the long-lived trainer kept between stages, -1 when none.
  pid_t kept_pid() const { return process_ ? process_->pid() : -1; }
  // Ends the kept trainer when it has trained nothing for `seconds` (since it was started ahead,
  // or since its last stage): on a GPU it holds memory for nothing (a study that has ended, a
  // trainer prepared for a run whose stages went elsewhere). Whether it ended one.
  bool stop_if_idle(double seconds);
  // Ends a long-lived trainer (killed with its process group); what it held is forgotten.
  void stop();

 private:
  bool run_stage(const protocol::Job& job, const std::string& checkpoint_dir,
                 const std::string& input_path, const TrainerHooks& hooks, bool many);
  // Starts the trainer `argv` (command_of) for the run spec `serves` (its JSON).
  void start(const std::vector<std::string>& argv, nlohmann::json serves);

  TrainerPlace place_;
  std::unique_ptr<TrainerProcess> process_;
  nlohmann::json serves_;  // the run spec whose stages the kept trainer trains
  std::vector<int64_t> held_;
  std::optional<int64_t> diverged_at_;
  TrainerLine last_line_;  // the last stage's done or diverged line
  protocol::JobTimes times_;
  Clock::time_point idle_since_;  // the kept trainer's last stage or start
};

}  // namespace hippo::worker
