#include "worker/job_runner.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "protocol/clock.h"
#include "worker/engine/checkpoint.h"

namespace hippo::worker {
namespace {

// Adds the seconds of its scope to `total`.
class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total) {}
  ~Stopwatch() { total_ += seconds_since(start_); }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& total_;
  const Clock::time_point start_ = Clock::now();
};

constexpr int kTrainerTickMs = 50;

}  // namespace

std::string JobRunner::on_own_storage(const std::string& what) const {
  return what + " [storage " + store_.identity() + ", " + options_.checkpoints + "]";
}

JobRunner::JobRunner(const Options& options, StateCache& cache, SnapshotWriter& snapshots,
                     const CheckpointStore& store)
    : options_(options),
      cache_(cache),
      snapshots_(snapshots),
      store_(store),
      engines_(options),
      trainer_(TrainerPlace{options.device, options.threads}) {}

bool JobRunner::run(const protocol::Job& job, const JobHost& host) {
  job_ = job;
  step_ = job.from;
  next_snapshot_ = 0;
  diverged_at_.reset();
  times_ = {};
  external_ = job.run.model.value("type", "") == "external";
  struct EndOfJob {
    Engine*& engine;
    ~EndOfJob() { engine = nullptr; }  // a Threads order after the job changes nothing
  } end{engine_};
  return external_ ? run_external(host) : run_on_engine(host);
}

void JobRunner::set_threads(int threads) {
  if (engine_) engine_->set_threads(threads);
}

std::string JobRunner::add_snapshot(const protocol::SnapshotOrder& order) {
  if (external_) return "an external trainer is running";
  if (order.step <= step_ || order.step > job_.to)
    return "snapshot_at.step: " + std::to_string(order.step) + " is outside [" +
           std::to_string(step_ + 1) + ", " + std::to_string(job_.to) + "]";
  auto pos = job_.snapshots.begin() + static_cast<std::ptrdiff_t>(next_snapshot_);
  while (pos != job_.snapshots.end() && pos->step < order.step) ++pos;
  if (pos == job_.snapshots.end() || pos->step != order.step) job_.snapshots.insert(pos, order);
  return "";
}

bool JobRunner::run_on_engine(const JobHost& host) {
  Engine& engine = [&]() -> Engine& {
    Stopwatch setup(times_.setup);  // the first job of a run builds its engine and reads its data
    return engines_.engine_for(job_.run);
  }();
  // Its own threads, or more: idle cores of this host that the master lends it (the bits do not
  // depend on them).
  engine.set_threads(job_.threads > 0 ? static_cast<int>(job_.threads) : options_.threads);
  engine_ = &engine;
  TrainState state;
  // The parent state's time is `load`, less the part a fetch takes (its own).
  const auto load_started = Clock::now();
  if (job_.parent_state < 0) {
    state = engine.initial_state();
  } else if (const TrainState* held = cache_.find(job_.parent_state)) {
    state = *held;  // fork in memory: one copy per buffer
  } else if (job_.fetch_parent) {
    // Its size is the run's state's at job_.from before a byte comes; its bytes are checked as a
    // loaded file's are, before they are kept.
    const CheckpointShape shape =
        engine.checkpoint_shape(job_.from, job_.hyperparams, job_.run.fixed);
    if (job_.parent_bytes != shape.file_bytes())
      throw StorageFailure("the parent checkpoint " + job_.parent_file + " has " +
                               std::to_string(job_.parent_bytes) + " bytes, the state at step " +
                               std::to_string(job_.from) + " has " +
                               std::to_string(shape.file_bytes()),
                           job_.parent_file);
    std::optional<std::string> bytes = fetch_parent(host, [&](std::string_view b) {
      state = read_checkpoint(b, job_.parent_file, shape, engine.backend());
    });
    if (!bytes) return false;
  } else if (!job_.parent_file.empty()) {
    // Every field is checked against what this run holds at job_.from: a file that is not that
    // state (missing, corrupt, forged, a FIFO) is lost, and the master rebuilds it by replay.
    const CheckpointShape shape =
        engine.checkpoint_shape(job_.from, job_.hyperparams, job_.run.fixed);
    try {
      state = load_checkpoint(snapshots_.path_of(job_.parent_file), shape, engine.backend(),
                              job_.parent_checksum);
    } catch (const CheckpointError& e) {
      throw StorageFailure(on_own_storage(e.what()), job_.parent_file);
    }
  } else {
    throw std::runtime_error("parent state " + std::to_string(job_.parent_state) +
                             " is neither in memory nor in a checkpoint");
  }
  times_.load = std::max(0.0, seconds_since(load_started) - times_.fetch);
  if (state.step != job_.from)
    throw std::runtime_error("parent state is at step " + std::to_string(state.step) +
                             ", the job starts at " + std::to_string(job_.from));

  size_t next_eval = 0;
  // Evaluates where asked at `step`, on state() (read only then: a pipelined engine assembles the
  // state for it, engine.h's StepDone); a non-finite loss stops the job there (the model
  // diverged).
  auto due_evals = [&](int64_t step, const auto& state) {
    while (next_eval < job_.eval_steps.size() && job_.eval_steps[next_eval] == step) {
      Stopwatch eval(times_.eval);
      const TrainState& s = state();
      Metrics m = engine.evaluate(s);
      // `params`: the trainable parameters, counted in the state's own parameter buffer.
      host.metric({.job = job_.id,
                   .step = s.step,
                   .metrics = {{"accuracy", m.accuracy},
                               {"loss", m.loss},
                               {"params", static_cast<double>(s.params.size())}}});
      ++next_eval;
      if (!std::isfinite(m.loss)) diverged_at_ = s.step;
    }
  };
  due_evals(state.step, [&]() -> const TrainState& { return state; });
  if (diverged_at_) return true;
  bool stopped = false;
  // Training is what the engine's call takes less what runs between its steps: evaluations,
  // snapshots, and the host's turn (heartbeats, the master's orders), which no part names.
  double between = 0;
  const auto train_started = Clock::now();
  // `state` itself is the engine's until train() returns: the callback reads done.state().
  engine.train(state, job_.to, job_.hyperparams, job_.run.fixed, [&](const StepDone& done) {
    Stopwatch turn(between);
    step_ = done.step();
    due_evals(step_, [&]() -> const TrainState& { return done.state(); });
    if (diverged_at_) return false;  // nothing after it is worth training, nor its state saving
    {
      Stopwatch save(times_.save);
      while (next_snapshot_ < job_.snapshots.size() &&
             job_.snapshots[next_snapshot_].step <= step_) {
        if (job_.snapshots[next_snapshot_].step == step_)
          snapshots_.take(job_.id, done.state(), job_.snapshots[next_snapshot_],
                          engine.config_hash());
        ++next_snapshot_;
      }
    }
    stopped = !host.between_steps(step_);
    Stopwatch save(times_.save);
    snapshots_.announce(false);
    return !stopped;
  });
  times_.train = std::max(0.0, seconds_since(train_started) - between);
  if (stopped && !diverged_at_) {  // abandoned: the master gives the work out again, or not
    snapshots_.drop();
    return false;
  }
  Stopwatch save(times_.save);  // the snapshots' files durable
  snapshots_.announce(true);
  return true;
}

std::optional<std::string> JobRunner::fetch_parent(
    const JobHost& host, const std::function<void(std::string_view)>& check) {
  Stopwatch fetch(times_.fetch);
  std::optional<std::string> bytes = host.fetch_parent();
  if (!bytes) return std::nullopt;
  try {
    // Neither used nor kept unless they are what the parent's producer wrote.
    check_content_hash(*bytes, job_.parent_checksum,
                       job_.parent_file + " (fetched through the master)");
    check(*bytes);
  } catch (const CheckpointError& e) {
    throw StorageFailure(e.what(), job_.parent_file);
  }
  // Only a copy this storage really holds counts (the master then reads it here, not elsewhere).
  if (store_.keep(job_.parent_file, *bytes)) host.fetched(static_cast<int64_t>(bytes->size()));
  return bytes;
}

bool JobRunner::stop_idle_trainer(double seconds) {
  if (!trainer_.stop_if_idle(seconds)) return false;
  cache_.set_trainer_states(trainer_.held());
  return true;
}

bool JobRunner::end_trainer() {
  if (trainer_.kept_pid() < 0) return false;
  trainer_.stop();
  cache_.set_trainer_states(trainer_.held());
  return true;
}

// The stage on the study's own trainer command (external_trainer.h).
bool JobRunner::run_external(const JobHost& host) {
  if (!options_.allow_trainers)
    throw std::runtime_error("worker " + options_.name + " refused to run the external trainer " +
                             job_.run.model["command"].dump() +
                             ": it runs no commands it receives unless started with --allow-exec "
                             "trainer");
  if (job_.fetch_parent && !fetch_parent(host, [](std::string_view) {})) return false;
  // The worker is the trust boundary: the trainer reads the parent's bytes that the worker
  // checked against the hash its producer reported, through a descriptor the worker holds
  // (ExternalTrainer::run, trainer_files.h), never the path again.
  if (job_.parent_state >= 0 && job_.parent_file.empty())
    throw StorageFailure(
        "the parent checkpoint of state " + std::to_string(job_.parent_state) + " has no file",
        job_.parent_file);
  TrainerHooks hooks;
  // The master's orders and the stop signals are looked at every 50 ms at most (heartbeats still
  // go when due): a trainer is killed within that of its job being given up.
  hooks.tick_ms = std::min(options_.heartbeat_ms, kTrainerTickMs);
  hooks.timeout_s = options_.trainer_timeout_s;
  hooks.metrics = [&](int64_t step, const protocol::json& metrics) {
    host.metric({.job = job_.id, .step = step, .metrics = metrics});
  };
  hooks.checkpoint = [&](int64_t step, const WrittenFile& file) {
    for (const protocol::SnapshotOrder& order : job_.snapshots) {
      if (order.step != step || order.file.empty()) continue;
      // A trainer that wrote nothing fails here, not at the next load.
      if (file.bytes == 0)
        throw std::runtime_error("the trainer's checkpoint for step " + std::to_string(step) +
                                 " (" + order.file + ") is empty");
      // The trainer said the file is written (durable, read once: external_trainer.h): from
      // here on, the worker vouches for these bytes.
      snapshots_.announce_written({.job = job_.id,
                                   .step = step,
                                   .state = order.state,
                                   .file = order.file,
                                   .bytes = file.bytes,
                                   .checksum = file.content_hash});
    }
  };
  hooks.tick = [&](int64_t step) {
    step_ = step;
    return host.between_steps(step);
  };
  hooks.progress = [&](int64_t step) { step_ = step; };
  // What a long-lived trainer holds is reported with the worker's own states, however the stage
  // ends (a trainer that failed or was stopped holds nothing).
  try {
    bool finished;
    try {
      finished = trainer_.run(job_, options_.checkpoints, hooks, cache_.trainer_states());
    } catch (const TrainerFileError& e) {  // the parent is lost here: the master replays it
      throw StorageFailure(on_own_storage(e.what()), job_.parent_file);
    }
    cache_.set_trainer_states(trainer_.held());
    if (finished) {
      diverged_at_ = trainer_.diverged_at();
      const double fetch = times_.fetch;
      times_ = trainer_.times();  // what the trainer reported, and its start
      times_.fetch = fetch;
    }
    return finished;
  } catch (...) {
    cache_.set_trainer_states(trainer_.held());
    throw;
  }
}

}  // namespace hippo::worker
