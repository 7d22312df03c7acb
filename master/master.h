// The master: one transport (transport.h: a ZeroMQ ROUTER socket, with CURVE when asked; or the
// simulator's workers) in front of its collaborators:
//
//   StudyDriver    (study_driver.h)   studies, searchers, trials, pending evaluations
//   StateRegistry  (state_registry.h) states, their checkpoint files, the metric cache
//   WorkerPool     (worker_pool.h)    workers, their jobs, liveness, storage retries
//   the scheduler  (scheduler.h)      pure functions: ready work and its assignment
//   reports        (reports.h)        summaries, progress, the workers list
//
// The front binds each message to the key its connection proved (protocol/trust.h), checks that
// the key's role may send it (access.h), decodes it (protocol/message.h), routes it by type to
// one handler (handlers() in master.cc), and after the messages of a poll asks the scheduler for
// work when something changed. A worker's report counts only for the job that the master gave to
// that worker's own connection, in this incarnation. The ROUTER's connections are watched
// (protocol/connection_watch.h): one that holds too much of an unfinished message is dropped. Every
// transition is written to the search plan before it is acted on. When another process holds the
// plan's write lock, a worker's message that needs to write waits, with that worker's later
// messages, in a queue retried every second (every handler's first write is its BEGIN IMMEDIATE,
// before which it changes nothing a retry would repeat); clients keep being answered meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "master/access.h"
#include "master/plan_lock.h"
#include "master/reports.h"
#include "master/scheduler.h"
#include "master/state_registry.h"
#include "master/storages.h"
#include "master/study_driver.h"
#include "master/transport.h"
#include "master/worker_pool.h"
#include "protocol/auth.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "protocol/trust.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

// Messages that arrived together are handled in one commit, at most this many (a bound on how
// long a reply waits for the commit, and on the transaction's size).
inline constexpr size_t kMessagesPerCommit = 128;

struct Options {
  std::string bind = "tcp://127.0.0.1:5555";
  std::string checkpoints = "checkpoints";  // the directory workers write into (shared disk)
  double worker_timeout_s = 10;             // a worker silent this long is lost
  int64_t snapshot_every = 0;  // also snapshot every this many steps inside a stage (0: never)
  // CURVE authentication: the socket admits only these keys (an --authorized directory, or the
  // operator's local key); nullopt (--insecure): anyone who reaches the socket, with every role.
  std::optional<protocol::ServerKeys> auth;
  StudyRules rules;  // --allow-exec, --max-trials, --max-steps, --max-evaluations
  ScheduleOrder order = ScheduleOrder::kCriticalPath;
  protocol::ConnectionLimits connections;
};

// The measured time per step of each root key (from the jobs that ended), for priorities.
class StepCosts {
 public:
  void add(const std::string& root_key, double seconds, int64_t steps);
  // Seconds per step; 1 for a root key with no measurement yet.
  double per_step(const std::string& root_key) const;

 private:
  std::map<std::string, std::pair<double, int64_t>> costs_;  // root key -> (seconds, steps)
};

// What the master's own work cost (CPU time of its thread): handling each kind of message, and
// deciding (a dispatch: ready work and its assignment to idle workers).
struct MasterCosts {
  struct Count {
    int64_t count = 0;
    double cpu_s = 0;
  };
  std::map<std::string, Count> messages;  // by message type
  Count decisions;
  int64_t jobs = 0;  // sent
};

class Master {
 public:
  // Opens the socket, restores the tree, the checkpoints and every running study from the plan,
  // and removes the checkpoint files of this plan's earlier masters that no row names.
  Master(SearchPlan plan, const Options& options);
  // The same over another transport (the simulator's); options.bind, auth and connections are
  // then the transport's business.
  Master(SearchPlan plan, const Options& options, std::unique_ptr<Transport> transport);
  ~Master();

  // Starts a study (for `hippo run`: in-process, so nobody's key owns it); throws SpecError or
  // std::invalid_argument (a duplicate name) and then changes nothing.
  int64_t submit(const StudySpec& spec, const json& spec_json, Policy policy);
  // Ends a running study as `hippo run` must when it cannot finish it (interrupted, no workers).
  void fail_study(int64_t study, const std::string& error);

  // Handles the messages that arrive within timeout_ms, then dispatches work to idle workers.
  void poll(int timeout_ms);

  bool study_running(int64_t study) const { return driver_.running(study); }
  // A searcher still holds operations back (the next poll goes on with them without waiting).
  bool expanding() const { return driver_.expanding(); }
  const MasterCosts& costs() const { return costs_; }
  // The search plan written to a new file (SearchPlan::save_copy): an in-memory plan's way out.
  void save_plan_copy(const std::string& path) { plan_.save_copy(path); }
  StudySummary summary(int64_t study);
  Progress progress(int64_t study) const;
  // Tells every worker to exit; the jobs still running are recorded as abandoned (their studies
  // ended, or the run was interrupted). The master handles no message after this.
  void shutdown_workers();
  // Deletes the checkpoint files this master ordered whose report never came (a job still under
  // way when a study ended). Call once none of its workers runs any more.
  void remove_unreported_checkpoints();

 private:
  // Who sent a message: its connection (ROUTER identity) and the key that connection proved.
  struct Sender {
    std::string peer;
    protocol::PeerIdentity identity;
  };
  // A handler of one message type: from (the decoded message, its sender).
  using Handler = std::function<void(Master&, const Sender& from, const json& message)>;
  static const std::map<std::string, Handler>& handlers();

  void restore_checkpoints();
  // Removes the files of earlier masters of this plan that no checkpoint row names (left by a
  // crash), logs how many, and records this master's incarnation (checkpoint_files.h).
  void sweep_checkpoints();
  // Handles messages that arrived together in one commit (each handler's transaction is a
  // savepoint in it): a commit costs more than most handlers. What they send waits in outbox_
  // for the commit, so that nobody hears of a change a crash could still undo. When another
  // process holds the plan, they are handled one by one (and wait in deferred_ as they must).
  void handle_together(std::vector<protocol::Envelope>& messages);
  // One message as it arrived: handled, or deferred behind its worker's earlier ones.
  void handle_or_defer(protocol::Envelope& envelope);
  // Handles one message. False when the search plan is locked by another process: the message
  // changed nothing and waits in deferred_, to be retried in order.
  bool try_handle(const protocol::Envelope& envelope);
  // Sends now, or after the commit of the messages being handled together.
  void send(const std::string& peer, const json& message);

  // The job a worker reports on: the one this master gave to that worker's connection, in this
  // incarnation (ProtocolError otherwise: the report is stale or not its own).
  RunningJob& reported_job(const ConnectedWorker& w, int64_t job, const std::string& incarnation,
                           const char* what);

  // Worker messages.
  void on_hello(const Sender& from, const protocol::Hello& m);
  void on_heartbeat(ConnectedWorker& w, const protocol::Heartbeat& m);
  void on_metric(ConnectedWorker& w, const protocol::Metric& m);
  void on_snapshot(ConnectedWorker& w, const protocol::Snapshot& m);
  void on_done(ConnectedWorker& w, const protocol::Done& m);
  void on_failed(ConnectedWorker& w, const protocol::Failed& m);
  void on_abandoned(ConnectedWorker& w, const protocol::Abandoned& m);
  // A job's parent checkpoint, fetched from another storage: a chunk asked for, a chunk a holder
  // read (relayed to the job's worker), the whole file kept on the job's worker's storage.
  void on_fetch_parent(ConnectedWorker& w, const protocol::FetchParent& m);
  void on_file_bytes(ConnectedWorker& w, const protocol::FileBytes& m);
  void on_fetched(ConnectedWorker& w, const protocol::Fetched& m);
  // Client requests: the fields of an ok reply.
  json on_submit(const Sender& from, const protocol::Submit& m);
  json on_status(const Sender& from, const protocol::Status& m);
  json on_cancel(const Sender& from, const protocol::Cancel& m);
  json on_list_workers(const Sender& from, const protocol::ListWorkers& m);
  json on_drain(const Sender& from, const protocol::Drain& m);

  // Bookkeeping around workers and jobs.
  void check_workers();
  // A job that ended before its end (lost, failed, abandoned, or still running at shutdown):
  // its row goes to the executions, reaching as far as its heartbeats said, and the steps it
  // trained past its last reported state, lost, count as executed (the dashboard's sum of the
  // executions equals the summary's steps executed).
  void record_unfinished(const RunningJob& job, const ConnectedWorker& w, ExecutionOutcome outcome,
                         const std::string& error = "");
  // Adds the job's row to the plan's executions (the dashboard's timeline) as it ends; `reached`
  // is clamped to its steps. A log, like events: a row that cannot be written is reported, not
  // fatal.
  void record_execution(const RunningJob& job, const ConnectedWorker& w, ExecutionOutcome outcome,
                        int64_t reached, const std::string& error = "");
  // The job trained its path over [from, step) and the worker holds the state at `step`.
  void mark_progress(RunningJob& job, int64_t step);
  void abandon_orphan_jobs();
  // Forgets a state whose checkpoint is lost (missing or corrupt): its row in the plan and its
  // files go, and the scheduler rebuilds the state by replay from the nearest earlier one.
  void forget_state(int64_t state, const std::string& why);
  // The copy of a state's file on one storage is lost (missing, corrupt, unreadable): that copy
  // goes; the state is forgotten when it was the last.
  void lose_copy(int64_t state, const std::string& storage, const std::string& why);
  // The storages that hold a state's file now: its plan row and the registry.
  void set_storages(int64_t state, std::set<std::string> storages);
  // The storage of a worker's checkpoint directory.
  std::string storage_of(const ConnectedWorker& w) const {
    return storages_.of_worker(w.hello.storage);
  }
  // Sends the job's worker the chunk of its parent at `offset`: read here when the master's own
  // directory holds the file, else asked of a connected worker whose storage holds it. With no
  // copy left that anyone can read, the state is forgotten (replayed) and the worker told.
  void serve_fetch(RunningJob& job, int64_t offset);
  // Sends the deletions that wait for a storage to a connected worker of it.
  void send_deletions();
  // The tree changed: states above split points move, and a running job that will pass a split
  // point is told to snapshot there.
  void on_tree_change(const Change& change);

  // Scheduling.
  // Draining workers that are idle are told to exit and leave the pool.
  void retire_drained_workers();
  void dispatch();
  void send_job(ConnectedWorker& w, const WorkItem& work);
  // Says once per study and device count when no connected worker has `devices` devices.
  void warn_if_no_worker_has(int64_t devices, int64_t study);
  // Says once per study when no connected worker runs external trainers.
  void warn_if_no_worker_runs_trainers(int64_t study);

  // Events are a log: one that cannot be written (the plan is locked) is reported and dropped,
  // never the work it describes.
  void log_event(std::optional<int64_t> study, const std::string& kind, const json& detail);

  double cpu_mark_ = 0;  // this thread's CPU time at the last read (poll)
  SearchPlan plan_;
  PlanLock lock_;  // one master per plan (plan_lock.h)
  Options options_;
  std::unique_ptr<Transport> transport_;
  StageTree tree_;
  StateRegistry states_;
  Storages storages_;                   // the master's own, and where files are removed
  std::set<std::string> incarnations_;  // of every master of this plan, this one's too
  StudyDriver driver_;
  WorkerPool pool_;
  StepCosts step_costs_;
  Priorities priorities_;                // kept between decisions (scheduler.h)
  InFlight in_flight_;                   // likewise
  std::vector<StageId> trained_stages_;  // trained further since the last dispatch
  int64_t studies_ended_seen_ = 0;       // by abandon_orphan_jobs
  std::set<std::pair<int64_t, int64_t>> device_warnings_;  // (study, most devices) said
  std::set<int64_t> trainer_warnings_;                     // studies told of no trainer worker
  // Worker messages that found the search plan locked, oldest first; retried every second.
  std::deque<protocol::Envelope> deferred_;
  // While messages are handled together: what they send, as (peer, body), in order.
  std::optional<std::vector<std::pair<std::string, std::string>>> outbox_;
  Clock::time_point last_busy_;
  MasterCosts costs_;
  bool schedule_changed_ = true;  // something arrived since the last dispatch
  bool trials_to_close_ = false;  // close_trained_trials() is due (a restart, a lost worker)
};

}  // namespace hippo::master
