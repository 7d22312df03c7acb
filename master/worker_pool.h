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
#include <optional>
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
  bool draining = false;   // `hippo drain`: no more work; told to exit once idle (and handed over)
  // Why it cannot work now, as it says itself (its heartbeat's fault: a full or read-only disk),
  // "" when it can.
  std::string fault;
  // Jobs it failed in a row for reasons of its own (a checkpoint it could not write, a trainer
  // process that died), and, once there were kWorkerFailuresInARow, why it gets no work until
  // `set_aside_until` (then one job on probation) or until it says it recovered.
  int failures_in_a_row = 0;
  int times_set_aside = 0;
  std::string set_aside;
  Clock::time_point set_aside_until{};
  bool handed_over = false;  // draining: the states only it held were handed over (copies.h)
  // It was sent a long-lived trainer's job or a Prepare: it keeps (or starts) a trainer.
  bool keeps_trainer = false;
};

// Jobs a worker may fail in a row for reasons of its own before it gets no more work for a while
// (30 s, doubling each time, at most 10 minutes), or until it says it recovered.
inline constexpr int kWorkerFailuresInARow = 3;

// How many times a stage may fail with `retry` (a checkpoint that cannot be written, a trainer
// process that died) before the trials that need it fail; and how many times its jobs may be lost
// (their worker went silent or restarted mid-job) without progress. Each retry waits a little
// longer (stage_retry_delay).
inline constexpr int kStorageAttempts = 3;
inline constexpr int kLostAttempts = 5;
// 1 s after the first failure, doubling, at most 30 s.
double stage_retry_delay(int attempts);

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
  // Whether add() would believe it (a decision's question; add() is the edit's).
  bool would_believe(StageId stage, const std::string& key, size_t keys_connected) const;
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
  // A worker that leaves (drained, told to exit, lost): its job, if it still has one, goes too
  // (its end is recorded in the same edit).
  void remove(const std::string& peer);
  const std::map<std::string, ConnectedWorker>& workers() const { return workers_; }
  // The workers without a job (draining ones too), by peer: what a decision looks at, without
  // stepping over the busy ones.
  const std::set<std::string>& idle() const { return idle_; }
  int64_t size() const { return static_cast<int64_t>(workers_.size()); }
  int64_t most_devices() const;
  // How many different keys the connected workers have.
  size_t keys() const;
  bool any_runs_trainers() const;

  // The id the next job gets (a decision names it before the job starts).
  int64_t next_job_id() const { return next_job_; }
  // Starts a job on an idle worker; its id is job.order.id, next_job_id().
  RunningJob& start(ConnectedWorker& worker, RunningJob job);
  const std::map<int64_t, RunningJob>& jobs() const { return jobs_; }
  std::map<int64_t, RunningJob>& jobs() { return jobs_; }
  // The job the worker runs, which must be `job` (ProtocolError naming `what` otherwise).
  RunningJob& job_of(const ConnectedWorker& worker, int64_t job, const char* what);
  // The job ended (done, failed, abandoned, lost): its worker, if it is still connected and
  // runs it, is idle and holds `held` (nullopt: what it held).
  void end_job(int64_t job, const std::optional<std::vector<int64_t>>& held);
  // The ids of the jobs that started or ended since the last call (InFlight::update).
  std::vector<int64_t> take_job_changes() { return std::exchange(job_changes_, {}); }

  // The workers silent for longer than timeout_s (they are lost: the caller's edit removes
  // them). Cheap until the oldest last_seen of the last look can have expired (last_seen only
  // moves forward): expiry_due says when.
  std::vector<std::string> silent(double timeout_s);
  bool expiry_due(double timeout_s) const {
    return !workers_.empty() && seconds_since(oldest_seen_) >= timeout_s;
  }
  // The running jobs not yet abandoned for which `needed` says false.
  std::vector<int64_t> orphans(const std::function<bool(const RunningJob&)>& needed) const;
  // Every worker forgets the state (its checkpoint was lost).
  void forget_state(int64_t state);

  // Failed attempts at a stage: how often it failed with `retry`, how often its job was lost,
  // and on which workers; cleared when it makes progress.
  int storage_failures(StageId stage) const;
  int lost_attempts(StageId stage) const;
  void add_storage_failure(StageId stage, const std::string& peer);
  void add_lost_attempt(StageId stage, const std::string& peer);
  void clear_storage_failures(StageId stage);
  // Whether the stage waits before its next attempt (it failed or was lost a moment ago); the
  // earliest time one such wait ends (Clock::time_point::max() when none does).
  bool backing_off(StageId stage) const;
  // The earliest future time at which a stage may be tried again or a worker set aside gets a
  // job on probation (Clock::time_point::max() when none).
  Clock::time_point next_retry() const;

  // The worker's job failed for a reason of its own: counted, and after kWorkerFailuresInARow in
  // a row it is set aside (true: it was just now), unless no other worker may work. A job it did
  // resets the count.
  bool failed_on_worker(ConnectedWorker& w, const std::string& error);
  void done_on_worker(ConnectedWorker& w);
  // Its own word on its health (a heartbeat's fault): a worker that says it recovered is no
  // longer set aside.
  void set_fault(ConnectedWorker& w, const std::string& fault);
  // Why a worker gets no work now ("" when it may): draining, its fault, set aside.
  std::string unavailable(const ConnectedWorker& w) const;
  // The workers a stage failed on while others remain to try, else null.
  const std::set<std::string>* excluded_for(StageId stage) const;
  Claims& claims() { return claims_; }
  // Whether the stage should go to another worker than `w`: w failed it on storage, or w's key
  // made a claim about it, while a worker that did neither is connected.
  bool should_avoid(StageId stage, const ConnectedWorker& w) const;

 private:
  struct StorageFailures {
    int count = 0;  // failed with retry
    int lost = 0;   // its job lost
    std::set<std::string> workers;
    Clock::time_point retry_at{};
  };
  // A failed (count) or lost attempt at the stage on a worker: counted, and the next waits.
  void add_attempt(StageId stage, const std::string& peer, int StorageFailures::*kind);
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
