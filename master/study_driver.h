// The studies a master runs: their searchers, their trials, and the evaluations they wait for
// (Determined's searcher.go plays this role), and the keeper of the state that the search plan
// mirrors: the stage tree, the states, the studies and trials in memory.
//
// It decides and it applies, apart (edit.h). Decisions read the state and return an Edit: the
// master's handlers ask for some (cancel, interrupt, fail, the evaluations a metric answers), and
// the driver's own queue of Work makes the rest, one item at a time (next()): a metric delivered
// to the trials that asked for it, a trial closed, an event fed to a searcher, each of the
// searcher's operations checked and carried out, the checkpoints collected when a study ends. A
// decision that throws has changed nothing but the searcher that threw. apply() carries an Edit
// out: rows into the plan (in the caller's transaction), then memory, then the edit's work into
// the queue. So a searcher's reaction never re-enters the handler that caused it, and a study
// whose searcher fails ends `failed`, with everything before it kept, plan and memory alike.
//
// It never talks to workers: the master's front passes it what workers report, and reads from it
// what the scheduler needs (needed_ends, pending_evaluations, failed_stages).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "master/edit.h"
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
// The root key a trial has under the shared policy: its architecture's (StudySpec::root_key_of).
inline std::string shared_root_key(const std::string& root_key) {
  return root_key.substr(0, root_key.find("/trial-"));
}

// A trial as the master tracks it.
struct TrackedTrial {
  TrialId id = -1;
  int64_t study = 0;
  int64_t number = 0;     // within its study, from 1
  RequestId request = 0;  // the searcher's id for it
  json params;
  bool in_tree = false;
  int64_t length = 0;  // the length of its latest Train (its length in the tree)
  // Stopped or diverged: the step it had been trained to, or diverged at; it needs nothing beyond.
  int64_t stopped_at = -1;
  std::optional<Fork> fork;  // from its Create: the donor (a request id) and the step
  std::set<int64_t> pending_evals;
  // How far its path was covered, when it entered the tree (or grew), by states that earlier
  // studies left behind: steps reused from history.
  int64_t history_steps = 0;
  TrialStatus status = TrialStatus::kPending;
  std::string error;  // why it failed
  // It was done when evaluations of its were distrusted (TrialRow::remeasure): it measures them
  // again and closes without telling its searcher, which saw them and decided already.
  bool remeasure = false;

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
  // What was spent on it over every master that ran it (the plan's row); run_s grows while this
  // master runs it, from `resumed` on.
  StudyAccount account;
  Clock::time_point resumed, ended;
  bool account_changed = false;  // since the plan's row was written
  std::string owner;             // the key that submitted it ("" in-process or anonymous: access.h)
  // What its searcher asked so far, against the master's Budget.
  int64_t requested_steps = 0, requested_evaluations = 0;
  // The searcher may hold operations back (a large grid's later trials: next_batch).
  bool expanding = true;
  // Events fed to the searcher since its state was last saved whole (the plan's journal).
  int64_t journaled = 0;
  // Its searcher had finished when evaluations were distrusted (StudyRow::remeasure): it ends
  // done once its trials have measured them again.
  bool remeasure = false;

  // The time some master ran it, this master's part included ("active").
  double run_s() const;
  // Unix seconds: when it was submitted, when this master took it up (submitted, resumed or
  // restored at a restart: what jobs ended before was its earlier runs'), when it ended (nullopt:
  // running or interrupted).
  double created_at = 0, resumed_at = 0;
  std::optional<double> ended_at{};
  // Its elapsed time from submit to end (or now), a master's outage included, the time it sat
  // interrupted (paused, until resumed) left out.
  double wall_s() const;
};

// `hippo enqueue`'s params as the master stores and compares them: each leaf's value as its
// distribution types it (a uniform or loguniform leaf's number as a double, so 1 is 1.0 and 0.1000
// is 0.1; a grid or choice leaf's value as the candidate of the spec it equals, numbers compared
// as numbers; an int leaf's integer as it is). `params` must have passed
// StudySpec::check_params.
json enqueued_params(const SearchSpace& space, const json& params);

// A running study has a configuration already (Optuna's enqueue_trial(skip_if_exists=True)): its
// trial with equal params (enqueued_params' form; the lowest number), or, when no trial has them
// yet, a configuration enqueued (in the spec or by `hippo enqueue`) that is to become one.
struct ExistingParams {
  int64_t trial = 0;  // its number in the study; 0: enqueued, waiting for a free slot
  TrialStatus status = TrialStatus::kPending;
};
// What `hippo enqueue` decided: the edit that gives the searcher the configuration, or, when the
// study has it already, nothing to do and which trial has it.
struct EnqueueDecision {
  Edit edit;
  std::optional<ExistingParams> existing;
};

// A study as it is read from the plan, to be taken up (edit::TakeUpStudy).
struct LoadedStudy {
  TrackedStudy study;
  std::vector<TrackedTrial> trials;
};

// Events journaled at least, before a searcher's state is saved whole again (a study's whole
// state is saved once its journal is as long as its trials): small studies save often.
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
  // `storages` is where the files of states that go are removed.
  StudyDriver(SearchPlan& plan, StageTree& tree, StateRegistry& states, Storages& storages,
              StudyRules rules);

  // Restores from the plan (after the tree and the states): metrics of every trial feed the metric
  // cache; the edit it returns takes up the running studies (their searchers and trials back; the
  // trials that may have been trained meanwhile are closed), collects the states no study needs,
  // and interrupts, saying why, a running study whose command this master may not run (its
  // --allow-exec: a master that may run it resumes it). Without `resume_running` (`hippo run`),
  // every running study is interrupted: its run ended without ending it.
  Edit restore(bool resume_running);

  // Starts a study for `owner` (its key: access.h): its row (the spec with its warm start read
  // from the plan, warm_start.h), its searcher's first operations checked and queued
  // (edit::CreateStudy; created() is its id once applied). Throws SpecError
  // (a command this master may not run, a spec or first operations over the budget) or
  // std::invalid_argument (a name that exists: the message says how to resume, rename or
  // delete), and then changes nothing.
  Edit submit(const StudySpec& spec, const json& spec_json, Policy policy,
              const std::string& owner = "") const;
  int64_t created() const { return created_; }
  // Takes up an interrupted study again (edit::TakeUpStudy: its row, searcher and trials).
  // std::invalid_argument for one that is not interrupted (checked again when it is applied, in
  // the statement that changes its status), or SpecError for one this master may not run.
  Edit resume(int64_t study) const;

  // Decisions the master asks for (throw std::invalid_argument, having changed nothing, for a
  // study that has ended).
  // A client cancels it: its open trials stop, it ends `cancelled`.
  Edit cancel(int64_t study) const;
  // A client enqueues a configuration (`hippo enqueue`): checked against the study's space, in
  // its stored form (enqueued_params), and, unless the study has it already (existing: then the
  // edit is empty), given to its searcher (Searcher::enqueue), whose whole state is saved at once
  // (its journal holds events, not configurations), so that a restart replays it; the trial it
  // creates now, if a slot is free, follows. Throws (SpecError for params outside the space,
  // std::invalid_argument for an ended study or a searcher that takes none) having changed
  // nothing.
  EnqueueDecision enqueue(int64_t study, const Params& params);
  // `hippo run` stops before it ends (a signal, a crash of its own): its trials stay as they are,
  // and a later run resumes them.
  Edit interrupt(int64_t study, const std::string& why) const;
  // It cannot go on (a job too large for any worker): its open trials stop, it ends `failed`.
  Edit fail(int64_t study, const std::string& error) const;
  // A stage failed in the engine: every running trial through it fails, and it is never scheduled
  // again.
  Edit fail_stage(StageId stage, const std::string& error) const;
  // The trials ending on `trial`'s path in [from, to] may be trained: Close work for each.
  Edit close_trials_ending(TrialId trial, int64_t from, int64_t to) const;
  // The metrics measured on `state`: cached, and delivered to the trials that wait for it.
  Edit deliver_metrics(const StateKey& state, const Measured& measured) const;
  // A job ended without evaluating `state` as it was asked to: the trials that wait for it hear
  // why (they fail, naming the metric and the step).
  Edit deliver_nothing(const StateKey& state, const std::string& why) const;
  // The model diverged at `state` (a job stopped there: Done::diverged): every running trial
  // whose path passes through it and needs more steps diverged there too (every later state of
  // theirs is NaN); their searchers see the worst value, at their next evaluation.
  Edit diverge_through(const StateKey& state, const std::string& why) const;

  // The queue of work: whether an item waits, and the decision on the next one (an empty edit
  // when it needs nothing). The caller applies each before it asks for the next.
  bool has_work() const { return !queue_.empty(); }
  Edit next();
  // Every running trial whose needed steps are trained and evaluated closes: after a restart or a
  // lost worker, the "done" that would have closed it may never come.
  void close_trained_trials();
  // Queues the next batch of operations that a searcher held back (a large grid enters the plan
  // between the master's other work); false when no study has any left.
  bool expand();
  bool expanding() const { return expanding_; }

  // Carries out an edit of the driver's own operations: rows into the plan (in the caller's
  // transaction), then memory, then its work into the queue. Throws only when the plan fails (the
  // master must stop then). The master's applier (Master::apply) carries out one operation at a
  // time instead (apply_op: a worker's or job's operation is its own), then the work (queue).
  void apply(const Edit& edit);
  void apply_op(const EditOp& op);
  void queue(const Edit& edit);
  // The splits of the tree since the last call (a trial placed or extended): their effects on
  // states and running jobs are the master's next operations.
  std::vector<Split> take_splits() { return std::exchange(splits_, {}); }

  // The id of a study known to this master: a JSON number is an id, a string a name or an id
  // (study_id_in); std::invalid_argument if there is none.
  int64_t find(const json& id_or_name) const;
  bool running(int64_t study) const;
  // How many studies have ended since the start (work that only they needed is orphaned then).
  int64_t studies_ended() const { return studies_ended_; }
  const std::map<int64_t, TrackedStudy>& studies() const { return studies_; }
  const TrackedTrial* trial(TrialId id) const;
  // A running study whose trials need the stage or what lies below it (its spec says how to run
  // the stage's jobs): the one with the lowest id; nullopt when none does.
  std::optional<int64_t> study_for(StageId stage) const;

  // Accounting of the master's own work: charges its CPU time (a message's, a poll's) to the
  // studies that edits touched since the last charge, evenly; if none, spreads it over the
  // running studies in proportion to their trials. (Measured by the caller, once: a CPU clock read
  // is a system call.)
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
  // The trials waiting for a metric, by the state they wait for.
  const PendingEvaluations& pending_evaluations() const { return pending_; }
  const std::set<StageId>& failed_stages() const { return failed_stages_; }
  // The studies whose trials pass through the stage or below it.
  std::set<int64_t> studies_through(StageId stage) const;
  // How far the trial's path has been trained, from step 0 without a gap.
  int64_t trained_length(const TrackedTrial& t) const;
  // Stages trained further since the last call (the scheduler's priorities forget trained ones).
  std::vector<StageId> take_trained_stages() { return std::exchange(trained_stages_, {}); }
  // Studies whose summary is to be recorded in the plan since the last call: those that ended,
  // and, at most every kLateSummaryEvery_s, ended ones whose account grew since (a job that served
  // them went on or ended late): a summary costs a pass over the study's trials and executions.
  std::set<int64_t> take_summaries_due();
  static constexpr double kLateSummaryEvery_s = 5;

  // Whether something changed what can be scheduled since the last call (and resets it).
  bool take_schedule_change();
  // A number that changes whenever stage ids or state keys on trials' paths may have changed: at
  // each split.
  int64_t tree_shape() const { return tree_shape_; }

 private:
  // The decisions on each kind of work.
  Edit decide(const Deliver& w);
  Edit decide(const Close& w);
  // After a trial that was measured again (TrackedTrial::remeasure) ended: its study ends done
  // when its searcher had finished and no other trial is open.
  void end_if_remeasured(const TrackedTrial& t, Edit& e) const;
  Edit decide(const Feed& w);
  Edit decide(const Operate& w);
  Edit decide(const Collect& w);
  // Train: the trial's placement, checked against the budget and the spec.
  edit::PlaceTrial placement(const TrackedStudy& s, const TrackedTrial& t,
                             const Train& train) const;
  // The study ends: its open trials first (stopped with `why`, unless it is interrupted: they wait
  // for a resume), then its row; its states are collected next.
  Edit end_study(const TrackedStudy& s, StudyStatus status, const std::string& error,
                 const std::string& why) const;
  // A study's row as memory will hold it: searcher, trials, pending evaluations. SpecError when
  // this master cannot run it (a command it may not run, a state it cannot load).
  LoadedStudy load_study(const StudyRow& row) const;

  // Applying each kind of operation.
  void apply_op(const edit::TrackTrial& op);
  void apply_op(const edit::PlaceTrial& op);
  void apply_op(const edit::EndTrial& op);
  void apply_op(const edit::RecordMetrics& op);
  void apply_op(const edit::CacheMetrics& op);
  void apply_op(const edit::Journal& op);
  void apply_op(const edit::EndStudy& op);
  void apply_op(const edit::FailStage& op);
  void apply_op(const edit::TrainStage& op);
  void apply_op(const edit::AddState& op);
  void apply_op(const edit::DropState& op);
  void apply_op(const edit::SetStorages& op);
  void apply_op(const edit::Retain& op);
  void apply_op(const edit::AddExecution& op);
  void apply_op(const edit::AddEvent& op);
  void apply_op(const edit::Count& op);
  void apply_op(const edit::RemoveFile& op);
  void apply_op(const edit::CreateStudy& op);
  void apply_op(const edit::TakeUpStudy& op);
  void apply_op(const edit::InterruptStoredStudy& op);
  // Writes the accounts of the studies that changed (their row in the plan), and every running
  // study's at least every `every_s` seconds (its run time grows).
  void apply_op(const edit::SaveAccounts& op);
  template <typename MasterOp>
  void apply_op(const MasterOp&) {
    throw std::logic_error("a worker's or job's operation is the master's to apply");
  }

  // The searcher's state: each event fed to it is journaled in the plan (Journal), and its whole
  // state saved now and then; a restarted master loads the saved state and feeds the journal
  // again (feed), dropping the operations: they were carried out the first time. A searcher
  // whose replay may differ (Searcher::replays_exactly) is saved whole after every event instead.
  static std::vector<Operation> feed(Searcher& searcher, const SearcherEvent& e);
  bool save_due(const TrackedStudy& s) const;
  bool trial_trained(const TrackedTrial& t) const;
  // The trial's path is needed up to its needed length now (after `change` to the tree).
  void raise_needed_ends(const TrackedTrial& t, const Change& change);
  // Every change of a trial's status goes through here (it keeps open_).
  void set_status(TrackedTrial& t, TrialStatus status);
  void forget_pending(TrackedTrial& t);
  // The owner recorded in the study's "submitted" event.
  std::string owner_of(int64_t study) const;
  // The trial or waiting configuration of a running study with these params (stored form).
  std::optional<ExistingParams> existing(const TrackedStudy& s, const json& params) const;
  void touched(int64_t study) { charged_.insert(study); }

  SearchPlan& plan_;
  StageTree& tree_;
  StateRegistry& states_;
  Storages& storages_;  // where checkpoint files are removed
  StudyRules rules_;
  std::vector<Split> splits_;  // since take_splits
  std::map<int64_t, TrackedStudy> studies_;
  std::map<TrialId, TrackedTrial> trials_;
  PendingEvaluations pending_;
  std::deque<Work> queue_;
  // The trials of running studies that are pending or running (set_status keeps it): the only
  // ones that may need training.
  std::set<TrialId> open_;
  NeededEnds needed_;
  int64_t tree_shape_ = 0;
  int64_t studies_ended_ = 0;
  std::set<StageId> failed_stages_;
  std::vector<StageId> trained_stages_;  // since take_trained_stages
  std::set<int64_t> summaries_due_;      // since take_summaries_due
  std::set<int64_t> grown_after_end_;    // ended studies whose account grew since then
  Clock::time_point late_summaries_{};   // when those were last taken
  std::set<int64_t> charged_;            // studies whose edits were applied since the last charge
  Clock::time_point accounts_saved_{};
  TrialId next_trial_ = 0;
  int64_t created_ = 0;  // the study the last CreateStudy made
  bool schedule_changed_ = true;
  bool expanding_ = true;  // a searcher may hold operations back
};

}  // namespace hippo::master
