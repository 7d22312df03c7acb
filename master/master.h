// The master's front: a router from messages to decisions, over its collaborators:
//
//   StudyDriver    (study_driver.h)   studies, searchers, trials, pending evaluations; the edits
//   StateRegistry  (state_registry.h) states, their checkpoint files, the metric cache
//   WorkerPool     (worker_pool.h)    workers, their jobs, liveness, failed attempts
//   Copies         (copies.h)         parents fetched across storages, lost copies, handovers
//   jobs           (jobs.h)           the order a job gets, its progress and execution rows
//   the scheduler  (scheduler.h)      pure functions: ready work and its assignment
//   reports        (reports.h)        summaries, progress, the workers list
//
// The messages come through a Transport (transport.h: the ROUTER socket, or the simulator's
// workers). Each one is bound to the key its connection proved (protocol/trust.h), checked
// against that key's role (access.h), decoded (protocol/message.h) and routed by type to one
// handler (handlers() in master.cc). A handler decides on the state as it is and applies what it
// decided as one Edit (edit.h); a decision that throws refuses the message and changes nothing.
// A worker's report counts only for the job that the master gave to that worker's own
// connection, in this incarnation.
//
// One poll is one transaction of the search plan: the messages that arrived together (at most
// kMessagesPerCommit), the study driver's queue of work they caused, the lost workers, the
// scheduling decision, then one commit, and only then what they send. When another process holds
// the plan's write lock, the transaction cannot begin: clients are answered what needs no write
// (the others are refused with the lock's error), and workers' messages wait, in order, and are
// tried again every second. When the plan itself fails (a full disk), the master stops: a
// restart resumes from the plan.
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
#include "master/copies.h"
#include "master/edit.h"
#include "master/events.h"
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

// The search plan failed while an edit was applied (a full disk, an I/O error): memory may be
// ahead of the plan, so the master cannot go on. A restart resumes from the plan.
struct PlanFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
  // A job of the built-in engine on a CPU takes the idle cores of its host (lent_threads,
  // scheduler.h; `hippo run --lend-cores`); false: every job runs with its worker's own threads.
  // Off by default: on a machine that others load, 2 kernel threads train slower than 1
  // (worker/README.md, "Idle cores lent").
  bool lend_cores = false;
  protocol::ConnectionLimits connections;
  // true (`hippo master`): the studies the plan says are running are resumed (this is a restart).
  // false (`hippo run`): they belong to runs that ended without ending them (a crash, SIGKILL):
  // they are interrupted, resumable, and only the study the run is asked for runs.
  bool resume_running = true;
  // --events FILE: the studies' events as JSON lines (events.h); "" for none, "-" for stdout.
  std::string events;
  // The requests it answers from clients, by message type; nullopt (`hippo master`): all of them.
  // `hippo run`: enqueue only (its one study runs to the end with its own workers: another study
  // submitted or resumed there would be left behind when the run ends).
  std::optional<std::set<std::string>> client_requests;
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

// The spec a study is stored with when `workers` are there to run it: searcher.parallel resolved
// (searchers/searcher.h's with_parallel). An explicit `parallel` below `workers` leaves workers
// idle for this study: said once, here.
json resolve_parallel(const json& spec_json, int64_t workers);

class Master {
 public:
  // Listens on options.bind (transport.h's ZmqTransport), restores the tree, the checkpoints and
  // every running study from the plan, and removes the checkpoint files of this plan's earlier
  // masters that no row names.
  Master(SearchPlan plan, const Options& options);
  // The same over another transport (the simulator's); options.bind, auth and connections are
  // then the transport's business.
  Master(SearchPlan plan, const Options& options, std::unique_ptr<Transport> transport);
  ~Master();

  // Starts a study (for `hippo run`: in-process, so nobody's key owns it); throws SpecError or
  // std::invalid_argument (a name that exists) and then changes nothing.
  int64_t submit(const StudySpec& spec, const json& spec_json, Policy policy);
  // Takes up an interrupted study again (for `hippo run --resume` and `hippo resume`): throws
  // std::invalid_argument or SpecError and then changes nothing.
  void resume(int64_t study);
  // `hippo run` stops before its study ends (a signal, its workers gone): the study is
  // interrupted, resumable where it stopped.
  void interrupt(int64_t study, const std::string& why);

  // Handles the messages that arrive within timeout_ms, then dispatches work to idle workers.
  // Throws PlanFailure when the search plan fails (the master must stop).
  void poll(int timeout_ms);

  bool study_running(int64_t study) const { return driver_.running(study); }
  // A study of the plan by its name, or by its id (study_id_in), whatever its status.
  std::optional<StudyRow> study_named(const std::string& name_or_id);
  // A searcher still holds operations back (the next poll goes on with them without waiting).
  bool expanding() const { return driver_.expanding(); }
  // Seconds until the master has something to do with no message coming (a stage's retry, a
  // worker's probation), if it waits for that: the simulator's clock goes there.
  std::optional<double> seconds_to_wake() const;
  const MasterCosts& costs() const { return costs_; }
  // The search plan written to a new file (SearchPlan::save_copy): an in-memory plan's way out.
  void save_plan_copy(const std::string& path) { plan_.save_copy(path); }
  StudySummary summary(int64_t study);
  // The study's summary as JSON, recorded in the plan (a `summary` event, what `hippo summary`
  // prints) when it differs from the last one recorded: `run` prints what it returns.
  json record_summary(int64_t study);
  Progress progress(int64_t study) const;
  // Handles messages until no job runs any more, for at most patience_s: the jobs of a study that
  // ended finish (their Done is on the way) instead of being cut off.
  void finish_jobs(double patience_s);
  // Tells every worker to stop its job at the next step and exit; each says how far it got
  // (Abandoned), within patience_s, and the steps are counted. Those that do not say are recorded
  // abandoned where their heartbeats said. The master handles no message after this.
  void shutdown_workers(double patience_s = 3);
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

  // One round of a poll: the messages, the driver's work, the housekeeping and a decision, in one
  // transaction; then what they send. When the plan is locked by another process, see above.
  void step(std::vector<protocol::Envelope>& batch);
  // Runs fn in a transaction that does not wait for another process's lock: false (fn not run)
  // when one holds it. What fn sends waits for the commit.
  bool transact(const std::function<void()>& fn);
  // What the CLI asks between polls (submit, resume, ...): fn in a transaction of its own (that
  // waits for the lock as long as the plan's busy timeout), its sends after the commit.
  void in_process(const std::function<void()>& fn);
  // In a transaction: records the summary of each study the driver says is due (one that ended,
  // or whose account grew after its end), as record_summary does (record: one study's).
  void record_due_summaries();
  json record(int64_t study);
  // Whether anything but messages asks for a round now (lost workers, work queued, a retry due).
  bool housekeeping_due() const;
  // Handles one message; a bad one is refused and logged (rate-limited).
  void handle(const protocol::Envelope& envelope);
  // Answers a client's message while the plan is locked: what needs no write is answered, the
  // rest refused with the lock's error. A worker's message waits (deferred_).
  void handle_while_locked(protocol::Envelope& envelope);
  // Refused messages: logged and recorded as events, at most kRefusalsLogged per sender and
  // minute (then once a minute, how many more).
  void refuse(const std::string& peer, const std::string& error);
  // The one applier (apply.cc): carries out an edit's operations in order, each writing its rows
  // to the plan and then changing memory (the driver's through StudyDriver::apply_op, the
  // workers' and jobs' below), the splits they make as more operations; then queues its work and
  // its messages, which go out after the commit. PlanFailure when the plan fails, or when no
  // transaction is open.
  void apply(const Edit& edit);
  void apply_op(const EditOp& op);
  void apply_worker_op(const edit::JoinWorker& op);
  void apply_worker_op(const edit::LeaveWorker& op);
  void apply_worker_op(const edit::AdmitStorage& op);
  void apply_worker_op(const edit::StartJob& op);
  void apply_worker_op(const edit::JobProgress& op);
  void apply_worker_op(const edit::SnapshotAt& op);
  void apply_worker_op(const edit::AbandonJob& op);
  void apply_worker_op(const edit::EndJob& op);
  void apply_worker_op(const edit::SettleEarlierJob& op);
  void apply_worker_op(const edit::Attempt& op);
  void apply_worker_op(const edit::ClearFailures& op);
  void apply_worker_op(const edit::Claim& op);
  void apply_worker_op(const edit::WorkerFault& op);
  void apply_worker_op(const edit::WorkerFailed& op);
  void apply_worker_op(const edit::DrainWorker& op);
  void apply_worker_op(const edit::KeepTrainer& op);
  void apply_worker_op(const edit::LendThreads& op);
  std::string worker_name(const std::string& peer);
  // The driver's queue of work, item after item, each applied before the next is decided.
  void drain();
  // Sends now, or after the commit of the transaction that is open.
  void send(const std::string& peer, const json& message);
  // Client requests that write need the plan: std::runtime_error with the lock's error otherwise.
  void require_writable() const;

  // The job a worker reports on: the one this master gave to that worker's own connection, in
  // this incarnation (ProtocolError otherwise: the report is stale or not its own).
  RunningJob& reported_job(const ConnectedWorker& w, int64_t job, const std::string& incarnation,
                           const char* what);

  // Worker messages.
  void on_hello(const Sender& from, const protocol::Hello& m);
  void on_heartbeat(ConnectedWorker& w, const protocol::Heartbeat& m);
  void on_metric(ConnectedWorker& w, const protocol::Metric& m);
  void on_snapshot(ConnectedWorker& w, const protocol::Snapshot& m);
  // A snapshot's file size is a claim: ProtocolError naming it when it is implausible
  // (implausible_checkpoint_bytes). True when the size was measured here or agrees with the root
  // key's size (the engine's files); false for a size that nothing confirmed (the first of a
  // root key, an external trainer's), bounded only by kMaxCheckpointBytes, which never evicts
  // kept states by itself.
  bool check_snapshot_bytes(const ConnectedWorker& w, const RunningJob& job,
                            const protocol::Snapshot& m, const std::string& storage);
  // The size of a root key's checkpoint files: measured by the master in its own directory, or
  // said by a worker of `key` ("": a state restored from the plan).
  struct RootSize {
    int64_t bytes = 0;
    bool measured = false;
    std::string key;
  };
  // From the cache, else from the first state of the root key that has a file; nullopt when
  // there is none, or when the size that one key said was contested by another.
  std::optional<RootSize> root_size(const std::string& root_key);
  void on_done(ConnectedWorker& w, const protocol::Done& m);
  void on_failed(ConnectedWorker& w, const protocol::Failed& m);
  void on_abandoned(ConnectedWorker& w, const protocol::Abandoned& m);
  // A job's parent checkpoint, fetched from another storage (copies.h): a chunk asked for, a
  // chunk a holder read, the whole file kept on the job's worker's storage.
  void on_fetch_parent(ConnectedWorker& w, const protocol::FetchParent& m);
  void on_file_bytes(ConnectedWorker& w, const protocol::FileBytes& m);
  void on_fetched(ConnectedWorker& w, const protocol::Fetched& m);
  // Client requests: the fields of an ok reply.
  json on_submit(const Sender& from, const protocol::Submit& m);
  json on_status(const Sender& from, const protocol::Status& m);
  json on_cancel(const Sender& from, const protocol::Cancel& m);
  json on_resume(const Sender& from, const protocol::Resume& m);
  json on_enqueue(const Sender& from, const protocol::Enqueue& m);
  // A study of the plan by a client's name or id (deleted ones are none).
  std::optional<StudyRow> stored_study(const json& name_or_id);
  json on_list_workers(const Sender& from, const protocol::ListWorkers& m);
  json on_drain(const Sender& from, const protocol::Drain& m);

  // Workers that went silent are lost, with their jobs (from the newest state they reported).
  void check_workers();
  // A job ends without its end (lost): its row, its lost steps, and one more attempt at its stage
  // (whose trials fail after kLostAttempts).
  void add_lost_job(Edit& e, const RunningJob& job, const std::string& worker_name);
  // A worker's record of a job of an earlier master (protocol::DroppedJob, in its hello): what
  // it trained, wrote and measured while no master heard it. The states still needed are adopted
  // (its storage holds their files, hashed), the evaluations delivered, and the steps past what
  // the earlier master counted (its running_jobs row) counted once.
  void adopt(Edit& e, const protocol::DroppedJob& record, const std::string& worker,
             const std::string& producer, const std::string& storage,
             const std::string& environment, const std::set<std::string>& files);
  // Jobs of earlier masters whose workers never said what became of them (running_jobs rows of
  // other incarnations) are given up once every worker has had time to say hello: recorded
  // `lost` at the step their master counted.
  void give_up_earlier_jobs();
  // How long after a start, or after a worker's last word about an earlier master's job, the
  // master waits for workers to come back: three worker timeouts.
  double returning_s() const { return 3 * options_.worker_timeout_s; }
  void abandon_orphan_jobs();

  // Scheduling.
  // Draining workers that are idle hand over what only they hold, then are told to exit.
  void retire_drained_workers();
  void dispatch();
  // `threads`: its kernels' (Job::threads; 0: the worker's own).
  void send_job(ConnectedWorker& w, const WorkItem& work, int64_t study, int64_t threads);
  // The threads of each job of the workers `assigned` work now (by peer: their studies' specs)
  // and of the running ones: lent_threads over every worker (scheduler.h). Running jobs whose
  // threads change are told now; the new ones' are in the map for their orders.
  std::map<std::string, int64_t> lend_cores(
      const std::map<std::string, const StudySpec*>& assigned);
  // Idle workers that run trainers and keep none start a running study's long-lived trainer now
  // (Prepare), so that its start (a PyTorch import) is over when that study's work reaches them.
  void prepare_trainers(const std::vector<IdleWorker>& idle);
  // Says once per study and device count when no connected worker has `devices` devices.
  void warn_if_no_worker_has(int64_t devices, int64_t study);
  // Says once per study when no connected worker runs external trainers.
  void warn_if_no_worker_runs_trainers(int64_t study);
  // Work goes on from a state computed in `environment` and no connected worker (their
  // environments for the study's model: `connected`) computes in it: an event and a warning,
  // once per study and environment until such a worker comes.
  void warn_if_no_worker_continues_in(const std::string& environment,
                                      const std::set<std::string>& connected, const StudySpec& spec,
                                      int64_t study);

  double cpu_mark_ = 0;  // this thread's CPU time at the last read (poll)
  // Jobs that earlier masters of this plan sent and never saw end (running_jobs), by
  // (incarnation, job): settled when their worker's hello says what became of them.
  std::map<std::pair<std::string, int64_t>, RunningJobRow> earlier_jobs_;
  // When a worker last said (in a heartbeat) that it still trains one of them.
  std::map<std::pair<std::string, int64_t>, Clock::time_point> earlier_heard_;
  Clock::time_point started_ = Clock::now();
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
  Copies copies_;
  StepCosts step_costs_;
  // By root key: root_size's cache (nullopt: contested, the next report sets it).
  std::map<std::string, std::optional<RootSize>> root_sizes_;
  Priorities priorities_;                                  // kept between decisions (scheduler.h)
  InFlight in_flight_;                                     // likewise
  int64_t studies_ended_seen_ = 0;                         // by abandon_orphan_jobs
  int64_t needed_version_seen_ = -1;                       // likewise
  Clock::time_point last_orphan_scan_{};                   // likewise
  std::set<std::pair<int64_t, int64_t>> device_warnings_;  // (study, most devices) said
  std::set<int64_t> trainer_warnings_;                     // studies told of no trainer worker
  std::set<std::pair<int64_t, std::string>> environment_warnings_;  // (study, environment) said
  // Worker messages that found the search plan locked, oldest first; retried every second.
  std::deque<protocol::Envelope> deferred_;
  Clock::time_point last_busy_;
  std::string busy_error_;  // the lock's error, while messages wait
  // While a transaction is open: what it sends, as (peer, body), in order.
  std::optional<std::vector<std::pair<std::string, std::string>>> outbox_;
  std::unique_ptr<EventStream> events_;  // --events: written as each transaction commits
  // Refusals per sender in the current minute (refuse()).
  struct Refusals {
    Clock::time_point since;
    int64_t count = 0;
  };
  std::map<std::string, Refusals> refusals_;
  Clock::time_point next_retry_ = Clock::time_point::max();  // of a stage backing off
  MasterCosts costs_;
  bool schedule_changed_ = true;  // something arrived since the last dispatch
  bool trials_to_close_ = false;  // close_trained_trials() is due (a lost worker)
  bool stopping_ = false;         // shutdown_workers: nothing more is dispatched
};

}  // namespace hippo::master
