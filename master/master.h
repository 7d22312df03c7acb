// The master: keeps the stage tree and the search plan, drives each study's searcher, and
// schedules stage executions on workers over one ZeroMQ ROUTER socket.
//
// Every transition is written to the search plan (storage/) before it is acted on: a searcher's
// operations and its new state in one transaction, a metric and the searcher's reaction in one
// transaction, a snapshot's checkpoint row before the stage's progress.
//
// Scheduling (DESIGN.md, "Scheduling"): work is every stage with pending steps; a stage is ready
// when the state at its trained_until exists (a checkpoint, or in a worker's memory). Ready work
// is ordered by its critical-path priority (StageTree::priorities with the measured time per step
// of its root key); an idle worker takes the highest, and a worker that holds the parent state in
// memory is preferred. A state that should exist but does not (a split inside a finished stage, a
// snapshot the worker was asked for too late) is rebuilt by a replay job from the nearest earlier
// state on the same path; replayed steps show in steps_executed.
//
// States are named by (stage, step): the state after `step` steps of the trials through `stage`,
// start < step <= end (step 0 is a fresh model and needs no name). When a stage splits at d, the
// states above d move to the upper part, exactly as the search plan's checkpoints do.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <zmq.hpp>

#include "protocol/auth.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

using protocol::json;
using Clock = std::chrono::steady_clock;

// How many times a stage may fail on storage (a checkpoint that cannot be written) before the
// trials that need it fail.
inline constexpr int kStorageAttempts = 3;

struct Options {
  std::string bind = "tcp://127.0.0.1:5555";
  std::string checkpoints = "checkpoints";  // the directory workers write into (shared disk)
  double worker_timeout_s = 10;             // a worker silent this long is lost
  int64_t snapshot_every = 0;  // also snapshot every this many steps inside a stage (0: never)
  bool quiet = false;          // no log lines on stderr
  bool verbose = false;        // a log line per job
  // CURVE authentication (--auth): the socket admits only the keys of auth->authorized_dir.
  std::optional<protocol::ServerKeys> auth;
};

// What `hippo run` and `hippo submit --wait` print at the end (INTERFACE.md).
struct StudySummary {
  int64_t study = 0;
  std::string name;
  std::string status;
  std::string error;
  int64_t trials = 0;
  int64_t steps_trial_based = 0;
  int64_t steps_unique = 0;
  int64_t steps_executed = 0;
  int64_t critical_path_steps = 0;
  double wall_s = 0;
  double makespan_ratio = 0;  // makespan / max(critical path, work / workers), in time
  bool has_best = false;
  int64_t best_trial = 0;  // number within the study
  json best_params;
  std::string metric;
  double best_value = 0;
  int64_t best_step = 0;
  double master_ms_per_trial = 0;  // the master's own CPU time (events, bookkeeping) per trial
  json to_json() const;
};

struct Progress {
  int64_t trials = 0, trials_closed = 0;
  int64_t steps_unique = 0, steps_trained = 0;  // of this study's part of the tree
  double elapsed_s = 0;
};

class Master {
 public:
  // Opens the socket, restores the tree, the checkpoints and every running study from the plan.
  Master(SearchPlan plan, const Options& options);
  ~Master();

  // Starts a study; throws SpecError or std::invalid_argument (a duplicate name) and then
  // changes nothing.
  int64_t submit(const StudySpec& spec, const json& spec_json, Policy policy);
  // Ends a running study at a client's request: status "cancelled" (a `cancelled` event), its
  // unfinished trials stopped where they are, and its checkpoints deleted unless another study
  // shares them. Work under way for it alone finishes its stage on the worker and is dropped.
  // Throws std::invalid_argument (no such study, or one that has ended) and then changes nothing.
  void cancel(int64_t study);
  // The id of a study known to this master: a JSON number is an id, a string a name or an id
  // (study_id_in, as the history queries read it); std::invalid_argument if there is none.
  int64_t find_study(const json& id_or_name) const;
  // The connected workers, for `hippo workers`: name, device, devices, threads, pid, seconds
  // since it was last heard, the states it holds, and its job (studies, trial, steps) if busy.
  json workers_json() const;

  // Handles the messages that arrive within timeout_ms, then dispatches work to idle workers.
  void poll(int timeout_ms);

  bool study_running(int64_t study) const;
  StudySummary summary(int64_t study);
  Progress progress(int64_t study) const;
  int64_t workers() const { return static_cast<int64_t>(workers_.size()); }
  // Tells every worker to exit.
  void shutdown_workers();
  // Deletes the checkpoint files this master ordered whose report never came (a job still under
  // way when a study ended). Call once none of its workers runs any more.
  void remove_unreported_checkpoints();
  SearchPlan& plan() { return plan_; }

 private:
  struct Worker {
    std::string peer, name, device;
    int64_t threads = 1, pid = 0;
    int64_t devices = 1;  // pipeline stages it can run (hello's "devices")
    Clock::time_point last_seen;
    int64_t job = -1;
    std::set<int64_t> held;  // state ids in its memory
  };
  struct StateInfo {
    StageId stage = kNoStage;
    int64_t step = 0;
    std::string file;
    int64_t checkpoint_row = -1;
  };
  struct Job {
    protocol::Job wire;
    std::string worker;
    TrialId rep = -1;
    std::set<int64_t> studies;  // whose trials need this work (executed steps are counted there)
    int64_t reported_step = 0;  // the latest step whose state the worker reported
    int64_t progress_step = 0;  // the latest step the worker said it reached
    bool abandoned = false;     // no running study needs it; the worker was told to stop
    double started_at = 0;      // unix seconds, for the plan's record of executions
    ExecutionKind kind = ExecutionKind::kTrain;
  };
  struct Trial {
    TrialId id = -1;
    int64_t study = 0;
    int64_t number = 0;
    RequestId request = 0;
    json params;
    bool in_tree = false;
    int64_t length = 0;        // the length of its latest Train (its length in the tree)
    int64_t stopped_at = -1;   // Stop: the step it had been trained to; it needs nothing beyond
    std::optional<Fork> fork;  // from its Create: the donor (a request id) and the step
    std::set<int64_t> pending_evals;
    TrialStatus status = TrialStatus::kPending;
    std::string error;  // why it failed
  };
  struct Study {
    int64_t id = 0;
    StudySpec spec;
    std::unique_ptr<Searcher> searcher;
    Policy policy = Policy::kShared;
    std::map<RequestId, TrialId> trials;
    StudyStatus status = StudyStatus::kRunning;
    int64_t steps_executed = 0;
    double busy_worker_s = 0;
    Clock::time_point started, ended;
    double master_s = 0;  // CPU time the master spent on this study's events
    std::string error;
  };
  // A unit of work the scheduler may hand to a worker.
  struct Candidate {
    double priority = 0;
    TrialId rep = -1;
    int64_t from = 0, to = 0;
    int64_t parent_state = -1;
    std::vector<int64_t> evals;
    StageId stage = kNoStage;  // the stage trained (for snapshots at trial ends inside it)
  };
  using Key = std::pair<StageId, int64_t>;  // a state's name: (stage, step)

  void restore();
  // After a transaction failed: the tree and trials in memory may be ahead of the plan, so they
  // are reloaded from it.
  void resync();
  // Runs fn in a transaction; if it throws, the study fails with the message, and memory is
  // brought back in line with the plan.
  void guarded(Study& s, const std::function<void()>& fn);
  // Handles one message. False when the search plan is locked by another process: the message
  // changed nothing and waits in deferred_, to be retried in order.
  bool try_handle(const protocol::Envelope& envelope);
  void handle(const std::string& peer, const json& m);
  void on_hello(const std::string& peer, const json& m);
  void on_metric(Worker& w, const json& m);
  void on_snapshot(Worker& w, const json& m);
  void on_done(Worker& w, const json& m);
  void on_failed(Worker& w, const json& m);
  void on_abandoned(Worker& w, const json& m);
  void on_client(const std::string& peer, const json& m);
  void check_workers();
  // The steps a job trained past its last reported state, lost: they count as executed.
  void count_lost_steps(const Job& job);
  // Adds the job's row to the plan's executions (the dashboard's timeline) as it ends; reached is
  // clamped to its steps. A log, like events: a row that cannot be written is reported, not fatal.
  void record_execution(const Job& job, const Worker& w, ExecutionOutcome outcome, int64_t reached,
                        const std::string& error = "");
  void abandon_orphan_jobs();
  void close_trained_trials();
  void dispatch();
  std::vector<Candidate> candidates();
  void send_job(Worker& w, const Candidate& c);
  // Says once per study and device count when no connected worker has `devices` devices.
  void warn_if_no_worker_has(int64_t devices, int64_t study);

  // Searcher plumbing: apply operations (in the caller's transaction), deliver events.
  void apply(Study& s, const std::vector<Operation>& ops);
  void place_trial(Study& s, Trial& t, int64_t length, const std::vector<int64_t>& evals);
  void record_metric(Trial& t, int64_t step, const json& metrics);
  void maybe_close(Trial& t);
  void finish(Study& s, StudyStatus status, std::string error);
  void fail_trials_through(const Job& job, const std::string& error);
  // Forgets a state whose checkpoint is lost (missing or corrupt): its row in the plan and its
  // file go, and the scheduler rebuilds the state by replay from the nearest earlier one.
  void forget_state(int64_t state, const std::string& why);
  // Events are a log: one that cannot be written (the plan is locked) is reported on stderr and
  // dropped, never the work it describes.
  void log_event(std::optional<int64_t> study, const std::string& kind, const json& detail);

  // Tree and state bookkeeping.
  Key key_of(TrialId rep, int64_t step) const;
  std::optional<int64_t> state_at(const Key& key) const;
  void note_change(const Change& change);
  void mark_progress(Job& job, int64_t step);
  double cost_per_step(const std::string& root_key) const;
  std::set<int64_t> studies_through(StageId stage) const;
  bool trial_trained(const Trial& t) const;
  // The steps a trial still needs: its length, or where it was stopped.
  int64_t needed_length(const Trial& t) const;
  // For every stage: the end up to which some trial that is not stopped needs it trained.
  std::unordered_map<StageId, int64_t> needed_ends() const;
  // How far the trial's path has been trained, from step 0 without a gap.
  int64_t trained_length(const Trial& t) const;
  // Deletes the checkpoints that no trial of a running study can reach any more (a trial of a
  // running study may still be extended, so its whole path is reachable).
  void collect_checkpoints();

  SearchPlan plan_;
  Options options_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::unique_ptr<protocol::CurveServer> curve_;  // with options_.auth
  StageTree tree_;
  std::map<std::string, Worker> workers_;  // by peer identity
  std::map<int64_t, Job> jobs_;            // running, by id
  std::map<int64_t, Study> studies_;
  std::map<TrialId, Trial> trials_;
  std::map<int64_t, std::set<TrialId>> pending_by_step_;  // eval step -> trials waiting for it
  std::map<int64_t, StateInfo> states_;                   // by state id
  std::map<Key, int64_t> state_index_;                    // key -> state id
  std::map<Key, json> metric_cache_;                      // key -> {"accuracy":..,"loss":..}
  std::set<StageId> failed_stages_;
  std::set<std::pair<int64_t, int64_t>> device_warnings_;  // (study, most devices) said
  // Stages whose job failed on storage (a checkpoint write): how often, and on which workers (a
  // retry goes to another worker when there is one).
  struct StorageFailures {
    int count = 0;
    std::set<std::string> workers;
  };
  std::map<StageId, StorageFailures> storage_failures_;
  // Worker messages that found the search plan locked, oldest first; retried every second.
  std::deque<protocol::Envelope> deferred_;
  Clock::time_point last_busy_;
  std::map<std::string, std::pair<double, int64_t>> step_cost_;  // root key -> (seconds, steps)
  bool schedule_changed_ = true;  // something arrived since the last dispatch
  bool trials_to_close_ = false;  // close_trained_trials() is due (a restart, a lost worker)
  // Random per start of a master: state ids and file names of one start never meet another's
  // (a worker's cache is cleared at welcome; checkpoint files keep unique names).
  std::string incarnation_;
  int64_t next_job_ = 1, next_state_ = 1;
  TrialId next_trial_ = 0;
};

}  // namespace hippo::master
