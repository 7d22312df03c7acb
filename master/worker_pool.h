// The workers connected to the master and the jobs they run: who is there, who is idle, who went
// silent (lost), what each job has reported, and which stages failed on a worker's storage (a
// retry goes to another worker). No I/O: the master's front sends what these decisions say.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "master/running_job.h"
#include "protocol/clock.h"
#include "protocol/message.h"

namespace hippo::master {

struct ConnectedWorker {
  std::string peer;  // its ROUTER identity
  protocol::Hello hello;
  Clock::time_point last_seen;
  int64_t job = -1;        // the job it runs, -1 when idle
  std::set<int64_t> held;  // state ids in its memory
};

// How many times a stage may fail with `retry` (a checkpoint that cannot be written, a trainer
// process that died) before the trials that need it fail.
inline constexpr int kStorageAttempts = 3;

class WorkerPool {
 public:
  // A worker said hello: it replaces any earlier worker of that peer, whose job is dropped.
  ConnectedWorker& join(const std::string& peer, const protocol::Hello& hello);
  ConnectedWorker* find(const std::string& peer);
  const std::map<std::string, ConnectedWorker>& workers() const { return workers_; }
  int64_t size() const { return static_cast<int64_t>(workers_.size()); }
  int64_t most_devices() const;

  // Starts a job on an idle worker; its id is given here.
  RunningJob& start(ConnectedWorker& worker, RunningJob job);
  const std::map<int64_t, RunningJob>& jobs() const { return jobs_; }
  std::map<int64_t, RunningJob>& jobs() { return jobs_; }
  // The job the worker runs, which must be `job` (ProtocolError naming `what` otherwise).
  RunningJob& job_of(const ConnectedWorker& worker, int64_t job, const char* what);
  // The job ended (done, failed, abandoned): the worker is idle and holds `held`.
  void end_job(ConnectedWorker& worker, const std::vector<int64_t>& held);

  // Workers silent for longer than timeout_s leave the pool; each one's job (if any) is handed
  // to on_lost before the job is dropped.
  std::vector<std::string> expire(double timeout_s,
                                  const std::function<void(const RunningJob&)>& on_lost);
  // Marks and returns the jobs that no running study needs any more.
  std::vector<int64_t> orphans(const std::function<bool(int64_t study)>& study_running);
  // Every worker forgets the state (its checkpoint was lost).
  void forget_state(int64_t state);

  // Storage failures of a stage: how often, and on which workers.
  int storage_failures(StageId stage) const;
  void add_storage_failure(StageId stage, const std::string& peer);
  void clear_storage_failures(StageId stage);
  // The workers a stage failed on while others remain to try, else null.
  const std::set<std::string>* excluded_for(StageId stage) const;

 private:
  struct StorageFailures {
    int count = 0;
    std::set<std::string> workers;
  };
  std::map<std::string, ConnectedWorker> workers_;  // by peer identity
  std::map<int64_t, RunningJob> jobs_;              // running, by id
  std::map<StageId, StorageFailures> storage_failures_;
  int64_t next_job_ = 1;
};

}  // namespace hippo::master
