// The workers connected to the master and the jobs they run: who is there, who is idle, who went
// silent (lost), what each job has reported, which stages failed on a worker's storage (a retry
// goes to another worker), and the claims that one worker alone cannot make good (Claims). No I/O:
// the master's front sends what these decisions say.
//
// A worker is its connection (the ROUTER identity, random and never published) and the key that
// connection proved: its name is a label that only the same key may take again (a reconnection).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "master/running_job.h"
#include "protocol/clock.h"
#include "protocol/message.h"
#include "protocol/trust.h"

namespace hippo::master {

struct ConnectedWorker {
  std::string peer;                 // its ROUTER identity
  protocol::PeerIdentity identity;  // the key its connection proved
  protocol::Hello hello;
  Clock::time_point last_seen;
  int64_t job = -1;        // the job it runs, -1 when idle
  std::set<int64_t> held;  // state ids in its memory
  bool draining = false;   // `hippo drain`: no more work; told to exit once idle
};

// How many times a stage may fail with `retry` (a checkpoint that cannot be written, a trainer
// process that died) before the trials that need it fail.
inline constexpr int kStorageAttempts = 3;

// Claims that one worker cannot make good alone, because they would let it destroy others' work:
// that a stage fails in the engine (its trials fail, in every study through it) or that a parent
// checkpoint it did not write is unreadable (the file is deleted). A claim about a stage is
// believed once workers of two different keys made it, or of every key connected when fewer are
// connected (the operator's own workers share one key: one of them is believed at once); until
// then the stage goes to a worker of another key.
class Claims {
 public:
  // A worker of `key` made a claim about `stage`; true when the claim is now believed.
  bool add(StageId stage, const std::string& key, size_t keys_connected);
  // Whether a worker of `key` made a claim about the stage that is not yet believed.
  bool made_by(StageId stage, const std::string& key) const;
  // The stage trained, or its claim was acted on.
  void clear(StageId stage);

 private:
  std::map<StageId, std::set<std::string>> keys_;  // stage -> the keys that made a claim
};

class WorkerPool {
 public:
  // A worker said hello over the connection `peer`. It replaces an earlier worker of that
  // connection, or of the same key and name (a reconnection), whose job is dropped; a name that a
  // worker of another key has is refused (ProtocolError).
  ConnectedWorker& join(const std::string& peer, const protocol::PeerIdentity& identity,
                        const protocol::Hello& hello);
  ConnectedWorker* find(const std::string& peer);
  // The connected worker of that name, if any.
  ConnectedWorker* find_named(const std::string& name);
  // A worker that leaves (drained, told to exit): idle, it holds no job.
  void remove(const std::string& peer) {
    idle_.erase(peer);
    workers_.erase(peer);
  }
  const std::map<std::string, ConnectedWorker>& workers() const { return workers_; }
  // The workers without a job (draining ones too), by peer: what a decision looks at, without
  // stepping over the busy ones.
  const std::set<std::string>& idle() const { return idle_; }
  int64_t size() const { return static_cast<int64_t>(workers_.size()); }
  int64_t most_devices() const;
  // How many different keys the connected workers have.
  size_t keys() const;
  bool any_runs_trainers() const;

  // Starts a job on an idle worker; its id is given here.
  RunningJob& start(ConnectedWorker& worker, RunningJob job);
  const std::map<int64_t, RunningJob>& jobs() const { return jobs_; }
  std::map<int64_t, RunningJob>& jobs() { return jobs_; }
  // The job the worker runs, which must be `job` (ProtocolError naming `what` otherwise).
  RunningJob& job_of(const ConnectedWorker& worker, int64_t job, const char* what);
  // The job ended (done, failed, abandoned): the worker is idle and holds `held`.
  void end_job(ConnectedWorker& worker, const std::vector<int64_t>& held);
  // The ids of the jobs that started or ended since the last call (InFlight::update).
  std::vector<int64_t> take_job_changes() { return std::exchange(job_changes_, {}); }

  // Workers silent for longer than timeout_s leave the pool; each one's job (if any) is handed
  // to on_lost before the job is dropped. Cheap until the oldest last_seen of the last look can
  // have expired (last_seen only moves forward).
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
  Claims& claims() { return claims_; }
  // Whether the stage should go to another worker than `w`: w failed it on storage, or w's key
  // made a claim about it, while a worker that did neither is connected.
  bool should_avoid(StageId stage, const ConnectedWorker& w) const;

 private:
  struct StorageFailures {
    int count = 0;
    std::set<std::string> workers;
  };
  void drop_job(int64_t job) {
    jobs_.erase(job);
    job_changes_.push_back(job);
  }

  std::map<std::string, ConnectedWorker> workers_;  // by peer identity
  std::set<std::string> idle_;                      // of workers_, those with no job
  Clock::time_point oldest_seen_{};                 // at most every worker's last_seen
  std::map<int64_t, RunningJob> jobs_;              // running, by id
  std::vector<int64_t> job_changes_;                // started or ended since take_job_changes
  std::map<StageId, StorageFailures> storage_failures_;
  Claims claims_;
  int64_t next_job_ = 1;
};

}  // namespace hippo::master
