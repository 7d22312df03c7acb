// Runs one job: loads or forks its parent state, trains its step range on the engine (or hands
// the stage to the study's own trainer command, external_trainer.h), evaluates where asked and
// snapshots where ordered. It knows nothing of sockets: what it reports goes through JobHost, and
// between two steps it asks the host whether to go on (heartbeats and the master's orders are
// the host's business).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "protocol/message.h"
#include "worker/checkpoint_store.h"
#include "worker/engine_cache.h"
#include "worker/external_trainer.h"
#include "worker/options.h"
#include "worker/snapshot_writer.h"
#include "worker/state_cache.h"

namespace hippo::worker {

struct JobHost {
  std::function<void(const protocol::Metric&)> metric;
  // Called after every step (the engine) or at every tick (an external trainer) with the step
  // reached; false stops the job there.
  std::function<bool(int64_t step)> between_steps;
  // The bytes of the job's parent checkpoint from another storage (Job::fetch_parent), or nullopt
  // when the job was stopped meanwhile. Throws StorageFailure when no copy can be had.
  std::function<std::optional<std::string>()> fetch_parent;
  // The fetched checkpoint was checked and kept in this worker's storage.
  std::function<void(int64_t bytes)> fetched;
};

class JobRunner {
 public:
  JobRunner(const Options& options, StateCache& cache, SnapshotWriter& snapshots,
            const CheckpointStore& store);

  // Runs the job: true when it reached its end (every evaluation reported and every snapshot
  // announced), false when between_steps stopped it (its snapshots not yet announced are
  // dropped). Throws StorageFailure (the disk), TrainerError (an external trainer; `crashed`:
  // its process died, another attempt may succeed) or another exception (the stage failed): the
  // caller settles the snapshots and reports the failure.
  bool run(const protocol::Job& job, const JobHost& host);

  // Starts the long-lived trainer of an external run ahead of its first stage (its import off
  // the critical path), when no trainer is kept; false when it started none.
  bool prepare(const protocol::RunSpec& run) { return trainer_.prepare(run); }
  // Ends the kept trainer when it has trained nothing for `seconds`
  // (ExternalTrainer::stop_if_idle); what it held is then held no more.
  bool stop_idle_trainer(double seconds);
  // Ends the long-lived trainer kept between stages; whether one was running.
  bool end_trainer();
  // A SnapshotAt for the running job (call from between_steps). Returns why it is refused, or ""
  // once it is taken: too late (the job is past that step) or an external trainer (it got its
  // checkpoints when it started); the master then replays that state itself.
  std::string add_snapshot(const protocol::SnapshotOrder& order);
  // The running job's threads from its next step on (a Threads order; call from between_steps):
  // its engine's kernels (built-in models on a CPU; an external trainer keeps its own).
  void set_threads(int threads);
  // The step the running (or last) job reached: what a job that stops or fails trained.
  int64_t reached() const { return step_; }
  // Where the running (or last) job's time went so far (its Done carries it).
  const protocol::JobTimes& times() const { return times_; }
  // Where the last job that run() finished stopped because its model diverged (a non-finite loss
  // at an evaluation: every later state would be too), if it did; then it trained nothing after.
  std::optional<int64_t> diverged_at() const { return diverged_at_; }

 private:
  bool run_on_engine(const JobHost& host);
  bool run_external(const JobHost& host);
  // Fetches the parent checkpoint from another storage and keeps it in ours; nullopt when the job
  // was stopped meanwhile. `check` refuses bytes that are not the state the job starts from.
  std::optional<std::string> fetch_parent(const JobHost& host,
                                          const std::function<void(std::string_view)>& check);

  // An error about a file of this worker's storage, naming the storage (its identity and
  // directory): the log says where a bad copy was.
  std::string on_own_storage(const std::string& what) const;

  const Options& options_;
  StateCache& cache_;
  SnapshotWriter& snapshots_;
  const CheckpointStore& store_;
  EngineCache engines_;
  Engine* engine_ = nullptr;  // the running job's, on the engine
  ExternalTrainer trainer_;   // a long-lived trainer stays here between its stages
  protocol::Job job_;         // the running job (its snapshots grow with SnapshotAt orders)
  int64_t step_ = 0;          // the step it has reached
  size_t next_snapshot_ = 0;  // the first of job_.snapshots not yet taken
  bool external_ = false;
  std::optional<int64_t> diverged_at_;
  protocol::JobTimes times_;
};

}  // namespace hippo::worker
