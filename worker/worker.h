// The worker process: says hello to its master, then reads its messages in one loop and handles
// each one with one handler per type, whether it is idle or between two steps of a job
// (handle()). Single-threaded: a job never races with its own orders, so nothing needs a lock.
//
//   master -> worker: Welcome (state ids start anew: the cache is cleared), Heartbeat (the answer
//   to ours: the master hears us), Job (run it; a job
//   number not above the last one since the welcome is a replay and is refused), SnapshotAt (one
//   more snapshot for the running job), Threads (the running job's threads from its next step:
//   its host's idle cores lent or taken back), Abandon (stop the running job), Reset (the master
//   restarted: say hello again, once the running job has ended), Refused (the master refused
//   our hello, saying why: logged, and the next hello waits longer), Shutdown (stop the running
//   job, say so, and exit), ReadFile (bytes of a
//   checkpoint in our storage, for a worker on another one), FileBytes (a chunk of the running
//   job's parent, which we fetch), DeleteFiles (checkpoints of ours that no state needs).
//   worker -> master: Hello (with our storage and its checkpoint files), Heartbeat, Metric,
//   Snapshot (job_runner.h), Done, Failed, Abandoned, FetchParent, FileBytes, Fetched; each
//   report on a job carries the incarnation of the master that gave it (its welcome's).
//
// A job goes on to its end whatever happens to its master (it restarts, goes silent, the
// connection breaks): its order has all it needs. What it trained, wrote and measured is in the
// record of the latest job (job_record.h), which every hello carries until a master welcomes it;
// the worker says hello once the job has ended.
//
// Checkpoints on another storage come through the master, chunk by chunk, each asked for when the
// one before it came (so a slow link holds one chunk in flight, and a lost answer is asked for
// again): workers connect to the master only, need no port of their own, and every byte is bound
// to the key of the worker that read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "protocol/clock.h"
#include "protocol/message.h"
#include "worker/checkpoint_store.h"
#include "worker/connection.h"
#include "worker/environment.h"
#include "worker/job_record.h"
#include "worker/job_runner.h"
#include "worker/options.h"
#include "worker/snapshot_writer.h"
#include "worker/state_cache.h"

namespace hippo::worker {

// SIGTERM and SIGINT make the worker stop its job at the next step, say so (Abandoned, at the
// step reached), and exit.
void install_stop_signals();

class Worker {
 public:
  explicit Worker(const Options& options);
  // Serves the master until it says shutdown (0) or a signal comes (0); 2 when the master refuses
  // our handshake (the cause is logged). Its last messages are given a moment to leave.
  int run();

 private:
  // Handles one message of the master (idle, or between two steps of the running job).
  void handle(const protocol::json& m);
  void on(const protocol::Welcome& m);
  void on(const protocol::Heartbeat& m);
  void on(const protocol::Job& m);
  void on(const protocol::SnapshotAt& m);
  void on(const protocol::Threads& m);
  void on(const protocol::Abandon& m);
  void on(const protocol::Prepare& m);
  void on(const protocol::EndTrainer& m);
  void on(const protocol::Reset& m);
  void on(const protocol::Refused& m);
  void on(const protocol::Shutdown& m);
  void on(const protocol::ReadFile& m);
  void on(const protocol::FileBytes& m);
  void on(const protocol::DeleteFiles& m);
  template <typename M>
  void on(const M& m);  // a type that a master does not send to workers: refused

  // Says who we are, with the record of the latest job if no master has heard it. Until the
  // welcome comes, further resets (answers to heartbeats that crossed the hello) are ignored, so
  // that one restart makes one hello; a hello that got no welcome in hello_wait_ is repeated:
  // 5 s, doubled at each Refused (the master said why it refused us: another key owns our
  // storage or name) up to 5 minutes, so that a refused worker says why once per attempt and
  // does not knock every 5 s forever. A refused worker sends no heartbeats.
  void hello();
  bool may_hello() const;
  // A welcomed worker that heard nothing from its master for silence_limit() (a minute, or 10
  // heartbeat intervals if longer; the master answers every heartbeat) has a connection that only
  // seems alive (a network cut off and back: a half-open TCP connection, or one the master's
  // socket no longer routes to): it connects anew, with a new routing identity, and says hello.
  bool master_silent() const;
  std::chrono::milliseconds silence_limit() const;

  // Runs a job and reports how it ended: Done, Abandoned (stopped: the master ordered it, or
  // said shutdown, or a signal came), or Failed; its record says the same.
  void execute(const protocol::Job& job);
  void fail(int64_t job, const std::string& error, bool retry, const std::string& lost_file);
  // Why this worker cannot work now ("" when it can), for its heartbeats: after it failed to
  // write to its checkpoint directory (a full or read-only disk), the directory is probed again
  // every few seconds until a write there succeeds (the master sets it aside meanwhile).
  const std::string& fault();
  // After each step of a job: a heartbeat when one is due, then the orders that came meanwhile
  // (waiting up to wait_ms for the first). False when the job must stop (abandoned, shutdown, a
  // signal). A master that restarted or went silent, or a broken connection, does not stop it:
  // the hello is due once it has ended.
  bool between_steps(int64_t step, int wait_ms = 0);
  // The bytes of the running job's parent checkpoint, chunk by chunk through the master; nullopt
  // when the job stopped meanwhile, or its master is gone (the job cannot go on without it).
  // StorageFailure naming the file as lost (the master rebuilds the state by replay) when the
  // master has no copy to send or no chunk came for a minute.
  std::optional<std::string> fetch_parent(const protocol::Job& job);

  Options options_;
  const WorkerEnvironment environment_;  // said in every hello
  Connection connection_;
  CheckpointStore store_;
  StateCache cache_;
  SnapshotWriter snapshots_;
  JobRunner runner_;
  bool awaiting_welcome_ = false;
  bool refused_ = false;  // the master refused our last hello (Refused)
  std::chrono::seconds hello_wait_{5};
  bool welcomed_once_ = false;  // a master proved its key and welcomed us
  Clock::time_point last_refusal_log_;
  std::string incarnation_;      // the welcome's
  std::string job_incarnation_;  // the running job's: every report on it carries it
  Clock::time_point hello_sent_;
  Clock::time_point last_heard_;  // the last message from the master
  Clock::time_point last_heartbeat_;
  int64_t last_job_ = 0;      // the newest job since the welcome (job ids start at 1)
  int64_t running_job_ = -1;  // the job being run, -1 when idle
  bool stop_job_ = false;     // the running job stops at the next step (abandon, shutdown)
  bool shutdown_ = false;
  bool hello_due_ = false;  // the master restarted or went silent: hello once the job has ended
  // The parent checkpoint being fetched for the running job.
  struct Fetch {
    int64_t job = -1;
    int64_t total = 0;
    std::string bytes{};  // those that came, in order
    std::string error{};  // the master's, when it has no copy to send
  };
  std::optional<Fetch> fetch_;
  Clock::time_point fetch_started_;  // of the last fetch: Fetched says how long it took
  std::string fault_;                // fault()
  Clock::time_point probed_{};       // the checkpoint directory's last probe
  JobRecord record_;                 // of the latest job, until a master heard it
  // The record's job and incarnation as the last hello said them (a welcome answers that hello).
  std::optional<std::pair<int64_t, std::string>> said_record_;
};

}  // namespace hippo::worker
