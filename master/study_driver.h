// The studies a master runs: their searchers, their trials, and the evaluations they wait for
// (Determined's searcher.go plays this role). It turns searcher operations into trials in the
// stage tree and rows in the search plan, turns metrics and trained stages into searcher events,
// and ends trials and studies. Every transition is written to the plan in the caller's
// transaction (or one of its own) before anything acts on it; a searcher that throws fails its
// own study only (study_transaction).
//
// It never talks to workers: the master's front passes it what workers report, and reads from it
// what the scheduler needs (needed_ends, pending_evaluations, failed_stages).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "master/pending_evaluations.h"
#include "master/retention.h"
#include "master/state_registry.h"
#include "master/storages.h"
#include "protocol/clock.h"
#include "protocol/trust.h"
#include "searchers/budget.h"
#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

using nlohmann::json;

// Trial-based policy: each trial has a root key of its own, so that it shares no stage with
// another; no later trial can ever reach its states.
inline std::string trial_based_root_key(const std::string& root_key, TrialId trial) {
  return root_key + "/trial-" + std::to_string(trial);
}
inline bool is_trial_based_root_key(const std::string& root_key) {
  return root_key.find("/trial-") != std::string::npos;
}

// A trial as the master tracks it.
struct TrackedTrial {
  TrialId id = -1;
  int64_t study = 0;
  int64_t number = 0;     // within its study, from 1
  RequestId request = 0;  // the searcher's id for it
  json params;
  bool in_tree = false;
  int64_t length = 0;        // the length of its latest Train (its length in the tree)
  int64_t stopped_at = -1;   // Stop: the step it had been trained to; it needs nothing beyond
  std::optional<Fork> fork;  // from its Create: the donor (a request id) and the step
  std::set<int64_t> pending_evals;
  // How far its path was covered, when it entered the tree (or grew), by states that earlier
  // studies left behind: steps reused from history.
  int64_t history_steps = 0;
  TrialStatus status = TrialStatus::kPending;
  std::string error;  // why it failed

  // The steps it still needs: its length, or where it was stopped.
  int64_t needed_length() const { return stopped_at >= 0 ? std::min(stopped_at, length) : length; }
};

// A study as the master tracks it (running, or ended since this master started).
struct TrackedStudy {
  int64_t id = 0;
  StudySpec spec;
  std::unique_ptr<Searcher> searcher;
  Policy policy = Policy::kShared;
  std::map<RequestId, TrialId> trials;
  StudyStatus status = StudyStatus::kRunning;
  std::string error;
  int64_t steps_executed = 0;
  double busy_worker_s = 0;  // worker time spent on its jobs
  // Checkpoint bytes its jobs fetched from other storages, and the time the fetches took.
  int64_t bytes_moved = 0;
  double transfer_s = 0;
  double master_s = 0;  // CPU time the master spent on its events
  Clock::time_point started, ended;
  std::string owner;  // the key that submitted it ("" in-process or anonymous: access.h)
  // What its searcher asked so far, against the master's Budget.
  int64_t requested_steps = 0, requested_evaluations = 0;
  // A batch of operations that the searcher gave (next_batch) and the plan has not yet taken.
  std::vector<Operation> held_back;
  // Events fed to the searcher since its state was last saved whole (the plan's journal).
  int64_t journaled = 0;
};

// Events journaled at least, before a searcher's state is saved whole again (StudyDriver::
// save_searcher): small studies save about as often as before.
inline constexpr int64_t kJournalBeforeSave = 16;

// What the master's operator allows a study (--allow-exec, --max-trials, ...).
struct StudyRules {
  Budget budget;
  protocol::ExecKinds exec;
  // --keep-checkpoints: the checkpoint directory's budget, states kept for later studies
  // included (retention.h); 0 deletes every state no running study needs.
  int64_t keep_checkpoint_bytes = kDefaultKeepCheckpointBytes;
};

class StudyDriver {
 public:
  // on_tree_change sees every change of the tree (splits move states; a running job may have to
  // snapshot at a split point). checkpoint_dir is where the files of collected states are removed.
  StudyDriver(SearchPlan& plan, StageTree& tree, StateRegistry& states, Storages& storages,
              StudyRules rules, std::function<void(const Change&)> on_tree_change);

  // Restores every study from the plan (after the tree and the states): metrics of every study
  // feed the metric cache, running studies get their searchers and trials back. A running study
  // whose command this master may not run (its --allow-exec) fails instead: nothing runs it.
  void restore();

  // Starts a study for `owner` (its key: access.h). Throws SpecError (a command this master may
  // not run, a spec over the budget) or std::invalid_argument (a duplicate name), and then
  // changes nothing.
  int64_t submit(const StudySpec& spec, const json& spec_json, Policy policy,
                 const std::string& owner = "");
  // Ends a running study at a client's request: status "cancelled", its unfinished trials stopped
  // where they are, and its checkpoints collected. Throws std::invalid_argument (one that has
  // ended) and then changes nothing.
  void cancel(int64_t study);
  // Fails a running study (e.g. `hippo run` interrupted), in a transaction of its own.
  void fail(int64_t study, const std::string& error);
  // The id of a study known to this master: a JSON number is an id, a string a name or an id
  // (study_id_in); std::invalid_argument if there is none.
  int64_t find(const json& id_or_name) const;

  bool running(int64_t study) const;
  // How many studies have ended since the start (work that only they needed is orphaned then).
  int64_t studies_ended() const { return studies_ended_; }
  const std::map<int64_t, TrackedStudy>& studies() const { return studies_; }
  TrackedStudy& study(int64_t id) { return studies_.at(id); }
  const TrackedTrial* trial(TrialId id) const;

  // Metrics measured on the state `key`: every trial waiting for its metric at that state records
  // them and its searcher reacts. One commit for all of them (a savepoint per study).
  void record_metrics(const StateKey& key, const json& metrics);
  // Closes the trials ending on `trial`'s path in [from, to] that are trained and evaluated
  // (call inside a transaction).
  void close_trials_ending(TrialId trial, int64_t from, int64_t to);
  // Closes every running trial whose needed steps are trained and evaluated: after a restart or a
  // lost worker, the "done" that would have closed it may never come.
  void close_trained_trials();
  // A stage failed in the engine (bad settings, a diverged model): retrying would fail again, so
  // every trial through it fails and it is never scheduled again (call inside a transaction).
  void fail_trials_through(StageId stage, const std::string& error);
  // Deletes the checkpoints that no trial of a running study can reach any more (their rows now,
  // their files once the transaction that deletes the rows has committed; a trial of a
  // running study may still be extended, so its whole path is reachable), except those that
  // retention.h keeps for later studies under the budget (call inside a transaction).
  void collect_checkpoints();
  // After a new checkpoint: if the directory is over its budget and holds states kept for later
  // studies, evicts by value (a transaction of its own).
  void keep_within_budget();

  // Accounting of the work done for studies.
  void count_executed(const std::set<int64_t>& studies, int64_t steps);
  void count_busy(const std::set<int64_t>& studies, double seconds);
  void count_moved(const std::set<int64_t>& studies, int64_t bytes, double seconds);
  // Charges the master's own CPU time (a message's, a poll's) to the studies whose transactions
  // ran since the last charge, evenly; if none did, spreads it over the running studies in
  // proportion to their trials. (Measured by the caller, once: a CPU clock read is a system call,
  // and a transaction per event measuring its own made them a tenth of a large simulation.)
  void charge_master_time(double seconds);

  // For the scheduler: for every stage, the end up to which some trial of a running study needs
  // it. Kept between calls: a trial placed or extended raises the ends along its path (and is
  // listed in `raised`; a split it made lists its new upper stage in `uppers`); a change that may
  // lower them (a trial stopped or failed, a study ended) has them computed again, from the open
  // trials only. `version` changes when they are computed again (then both lists start anew).
  struct NeededEnds {
    std::unordered_map<StageId, int64_t> ends;
    int64_t version = 0;
    std::vector<TrialId> raised;
    std::vector<StageId> uppers;
    bool valid = false;
  };
  const NeededEnds& needed_ends();
  // The stage was trained further (StageTree::mark_trained): states that trials wait for may
  // have been trained.
  void on_progress(StageId stage);
  // The trials waiting for a metric, by the state they wait for.
  const PendingEvaluations& pending_evaluations() const { return pending_; }
  const std::set<StageId>& failed_stages() const { return failed_stages_; }
  // The studies whose trials pass through the stage or below it.
  std::set<int64_t> studies_through(StageId stage) const;
  // How far the trial's path has been trained, from step 0 without a gap.
  int64_t trained_length(const TrackedTrial& t) const;

  // Whether something changed what can be scheduled since the last call (and resets it).
  bool take_schedule_change();

  // Takes the operations that searchers held back (a large grid's later trials) into the plan,
  // a batch per transaction, for about `seconds`; so a large study enters the plan between the
  // master's other work. Whether some are left.
  bool expand(double seconds);
  bool expanding() const { return expanding_; }

  // After a transaction failed: the tree and trials in memory may be ahead of the plan, so they
  // are reloaded from it.
  void resync();
  // A number that changes whenever stage ids or state keys on trials' paths may have changed: at
  // each split, and when resync reloads the tree.
  int64_t tree_shape() const { return tree_shape_; }

 private:
  // Runs fn in a transaction; if it throws, the study fails with the message, and memory is
  // brought back in line with the plan. The plan being locked (PlanBusy) is rethrown: the caller
  // retries later, the study is fine.
  void study_transaction(TrackedStudy& s, const std::function<void()>& fn);
  // Carries out a searcher's operations (in the caller's transaction).
  void apply(TrackedStudy& s, const std::vector<Operation>& ops);
  void place_trial(TrackedStudy& s, TrackedTrial& t, int64_t length,
                   const std::vector<int64_t>& evals);
  void record_metric(TrackedTrial& t, int64_t step, const json& metrics);
  void stop(TrackedTrial& t, const std::string& reason);
  void maybe_close(TrackedTrial& t);
  void finish(TrackedStudy& s, StudyStatus status, std::string error);
  bool trial_trained(const TrackedTrial& t) const;
  void forget_pending(TrackedTrial& t);
  // The searcher's state: its whole state is saved now and then (save_searcher, at the end of a
  // study's transaction), and each event fed to it in between is journaled in the plan (journal,
  // before its operations are applied, so that events they cause come after it). A restarted
  // master loads the saved state and feeds the journal again (feed), dropping the operations:
  // they were carried out the first time. A searcher whose replay may differ
  // (Searcher::replays_exactly) is saved whole after every event instead.
  static std::vector<Operation> feed(Searcher& searcher, const SearcherEvent& e);
  void journal(TrackedStudy& s, const SearcherEvent& e);
  // Feeds the event, journals it and applies the operations (in the caller's transaction).
  void react(TrackedStudy& s, const SearcherEvent& e);
  void save_searcher(TrackedStudy& s);
  // The trial's path is needed up to its needed length now (after `change` to the tree).
  void raise_needed_ends(const TrackedTrial& t, const Change& change);
  // Every change of a trial's status goes through here (it keeps open_).
  void set_status(TrackedTrial& t, TrialStatus status);
  // The owner recorded in the study's "submitted" event.
  std::string owner_of(int64_t study);
  // Counts what the study's searcher asks against the budget; std::runtime_error (which fails
  // the study) beyond it.
  void charge_budget(TrackedStudy& s, int64_t steps, int64_t evaluations);

  SearchPlan& plan_;
  StageTree& tree_;
  StateRegistry& states_;
  Storages& storages_;  // where checkpoint files are removed
  StudyRules rules_;
  std::function<void(const Change&)> on_tree_change_;
  std::map<int64_t, TrackedStudy> studies_;
  std::map<TrialId, TrackedTrial> trials_;
  PendingEvaluations pending_;
  // The trials of running studies that are pending or running (set_status keeps it): the only
  // ones that may need training.
  std::set<TrialId> open_;
  NeededEnds needed_;
  int64_t tree_shape_ = 0;
  int64_t studies_ended_ = 0;
  std::set<StageId> failed_stages_;
  std::set<int64_t> charged_;  // studies whose transactions ran since charge_master_time
  TrialId next_trial_ = 0;
  bool schedule_changed_ = true;
  bool expanding_ = true;  // a searcher may hold operations back
};

}  // namespace hippo::master
