// What the dashboard shows, read from the search plan: one PlanView per state of the file, built
// in one read snapshot, never written back. Pure computation over the plan's rows and stage tree
// (no HTTP, no SVG): the pages and the report draw from it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "searchers/spec.h"
#include "storage/plan.h"

namespace hippo::dashboard {

// A trial's result in a study of several objectives or constraints: its last evaluation that
// reported every goal metric (master::trial_results, the rule of `hippo best`).
struct GoalResult {
  int64_t step = 0;
  std::vector<double> values;   // by objective
  double violation = 0;         // how far the constraints are from holding there (0: they hold)
  bool feasible = false;        // the constraints hold and the trial did not diverge
  bool pareto_optimal = false;  // feasible, and no feasible result dominates it
};

struct TrialView {
  TrialRow row;
  std::vector<std::pair<int64_t, double>> curve;  // (step, value) of the study's metric, by step
  std::map<std::string, double> last;             // each metric's value at its last step
  std::optional<double> best;                     // the trial's best value of the study's metric
  int64_t needed = 0;   // steps it needs: its length, or how far it got when it was stopped
  int64_t trained = 0;  // how far its path is trained from step 0
  std::optional<GoalResult> result;  // only when the study's goals are multi()
};

// How a stage looks on the tree: trained to its end, training (partly trained, still needed),
// pending (nothing trained, still needed), pruned (no trial that is still running needs the rest).
enum class StageState { kTrained, kTraining, kPending, kPruned };
const char* to_string(StageState state);

struct StageView {
  Stage stage;             // as stored (its end is the largest any trial asked for)
  int64_t needed_end = 0;  // the end that this study's trials need
  StageState state = StageState::kPending;
  std::vector<int64_t> trials_ending;  // numbers of this study's trials ending in it
  int64_t trials_through = 0;          // this study's trials that pass through it
  std::vector<int64_t> checkpoints;    // steps with a checkpoint
  bool on_critical_path = false;       // on the path of the study's longest trial
};

struct StudyView {
  StudyRow row;
  Goals goals;  // of the stored spec (goals_of); metric and maximize are its first objective's
  std::string metric = "accuracy";
  bool maximize = true;
  std::vector<TrialView> trials;         // by number
  std::vector<std::string> param_names;  // in the spec's order (master::param_order)
  std::vector<StageView> stages;  // the study's part of the tree, each parent before its children
  std::vector<ExecutionRow> executions;  // those that served the study, by start
  int64_t trials_closed = 0;
  int64_t steps_trial_based = 0, steps_unique = 0, steps_trained = 0, steps_executed = 0;
  int64_t critical_path_steps = 0;
  int64_t not_finite = 0;  // evaluations of the metric that were NaN or infinite (never drawn)
  double wall_s = 0;
  // The best (trial number, value, step) over every value of the metric, if any; under
  // constraints the first Pareto-optimal result's (`hippo best`); none with several objectives.
  struct Best {
    int64_t trial = 0;
    double value = 0;
    int64_t step = 0;
  };
  std::optional<Best> best;
  std::vector<int64_t> front;  // numbers of the trials whose result is Pareto-optimal
  // steps_trial_based / steps_unique: what sharing saved (1 = nothing), 0 before any work.
  double saving() const;
  // param_names, then any other name the trials' params hold, by name (a view made by hand).
  std::vector<std::string> parameter_names() const;
  const TrialView* trial(int64_t number) const;  // nullptr if none
};

struct PlanView {
  int64_t version = 0;  // SearchPlan::data_version() it was read at
  double read_at = 0;   // unix seconds
  std::vector<std::shared_ptr<const StudyView>> studies;  // not deleted, by id
  // A study named by its name or id (study_id_in); nullptr if none.
  std::shared_ptr<const StudyView> find(const std::string& name_or_id) const;
};

// The hypervolume of the Pareto front of the trials so far, by trial number, for a study of
// 2 to kMaxHypervolumeObjectives objectives (searchers/pareto.h): one reference point for the
// whole study (hypervolume_reference over every feasible result), a point every ceil(n /
// max_points) trials and at the last one. Empty without a feasible result, or for other studies.
struct HypervolumeHistory {
  std::vector<double> reference;                   // by objective
  std::vector<std::pair<int64_t, double>> points;  // (trial number, hypervolume of trials 1..it)
};
HypervolumeHistory hypervolume_history(const StudyView& study, size_t max_points = 200);

// Reads every study in one snapshot of the plan, or only the one `only` names (its name or id;
// none if there is no such study): then only its part of the plan (the tree of its trials' root
// keys, SearchPlan::load_study_tree, and its own rows), and its trials' values are parsed again
// rather than kept twice (`parsed` is for a reader that reads the same plan again). `now` (unix seconds) is the end of the wall time of running
// studies. `parsed` keeps the trials' parsed values from one read to the next: a reader that
// reads the same plan again parses only the trials added since (SearchPlan::trials).
PlanView read_plan(SearchPlan& plan, double now, const std::string& only = "",
                   ParsedTrialValues* parsed = nullptr);

// Reads the same plan again and again (the dashboard's server), each time only what changed since
// the read before (the plan's change marks, SearchPlan::changes_since): the rows read are those
// of the trials and stages written since, their metrics and checkpoints, the executions added,
// and the studies' own rows. A study that none of them touches keeps its view (the same object,
// so pages made from it stay good); a touched one is computed again from its rows, kept and
// re-read, as read_plan computes it. The stage tree is kept too and brought up to date by adding
// and extending the changed trials as the master did, checked against every stage the plan says
// changed; only where they differ (the master's order was another) is it restored whole. A plan
// without change marks (an older file, read only) is read whole each time (read_plan).
class PlanReader {
 public:
  PlanReader();
  ~PlanReader();
  PlanReader(PlanReader&&) noexcept;
  PlanReader& operator=(PlanReader&&) noexcept;

  PlanView read(SearchPlan& plan, double now);

  // What the last read did (bounded by what changed: tests check it).
  struct Work {
    size_t trials_read = 0;       // trial rows read (all of them at the first read)
    size_t studies_computed = 0;  // study views computed again
    bool tree_restored = false;   // the stage tree restored whole rather than brought up to date
  };
  const Work& last_work() const { return work_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  Work work_;
};

}  // namespace hippo::dashboard
