// What the master tells people: a study's summary (the JSON line of `run` and
// `submit --wait`), its progress (the bar of `hippo run`), the workers list (`hippo workers`),
// and the best trial, the one rule that the history queries (master/cli/) use too.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "master/study_driver.h"
#include "master/worker_pool.h"
#include "searchers/spec.h"
#include "storage/plan.h"
#include "storage/time_split.h"

namespace hippo::master {

// The best value of the objective's metric among `metrics` (NaN and infinities never win, nor
// any row of the `diverged` trials; of equal values the first row wins), or nullopt when no row
// has it.
std::optional<MetricRow> best_metric(const std::vector<MetricRow>& metrics,
                                     const Objective& objective,
                                     const std::set<TrialId>& diverged = {});

// A trial's result when its study has several objectives or constraints (docs/spec.md, "Several
// objectives"): its last evaluation that reported every metric of the goals.
struct TrialResult {
  TrialId trial = 0;
  int64_t step = 0;
  std::vector<double> values;  // by objective
  double violation = 0;        // of the constraints there (pareto.h); 0: they hold
  bool diverged = false;       // the trial diverged (never feasible, never on the front)
  bool feasible() const { return violation == 0 && !diverged; }
};

// Every trial's result among `metrics` (rows by trial, step, name), in trial order; trials
// without an evaluation that has every metric of the goals have none.
std::vector<TrialResult> trial_results(const std::vector<MetricRow>& metrics, const Goals& goals,
                                       const std::set<TrialId>& diverged = {});
// The feasible results that no other feasible result dominates (pareto.h), in trial order. With
// one objective: the results of its best value.
std::vector<TrialResult> pareto_optimal(const std::vector<TrialResult>& results,
                                        const Goals& goals);
// {metric: value} of a result, by objective.
json values_json(const TrialResult& r, const Goals& goals);

// A study's parameter names in the order of its spec: its search space's leaves (docs/spec.md:
// by setting name, then the schedule's field order, then list position; model leaves last), then
// any other name its trials' params hold, in the order met. The one order of parameter columns
// (`trials`, `best`, `export`); a stored spec this binary cannot read gives the trials' order.
// `params` holds each trial's params object (TrialRow::params).
std::vector<std::string> param_order(const json& spec, const std::vector<const json*>& params);
// `params` with its names in that order (names not in `order` last, as they come).
nlohmann::ordered_json ordered_params(const json& params, const std::vector<std::string>& order);

struct StudySummary {
  int64_t study = 0;
  std::string name;
  std::string status;
  std::string error;
  int64_t trials = 0;
  int64_t steps_trial_based = 0;
  int64_t steps_unique = 0;
  int64_t steps_executed = 0;
  // Of steps_unique, those that no job of this study trained: earlier (or concurrent) studies
  // did, and their states or evaluations served it (retention.h). Of those it trained, the ones
  // its earlier runs trained (before it was resumed, or before its master restarted), and the
  // steps trained again (a replay after a lost state or job): so that steps_executed +
  // steps_reused = steps_unique + steps_redone.
  int64_t steps_reused = 0;
  int64_t steps_earlier_runs = 0;
  int64_t steps_redone = 0;
  // Of the steps its jobs trained, those the same jobs trained for other studies too (studies
  // running at the same time that need the same stages): counted in each one's steps_executed.
  int64_t steps_shared = 0;
  int64_t critical_path_steps = 0;
  // Checkpoint bytes fetched from other storages for its jobs (no shared disk), and the seconds
  // those fetches took.
  int64_t bytes_moved = 0;
  double transfer_s = 0;
  double wall_s = 0;          // from submit to end (or now), outages included, pauses left out
  double active_s = 0;        // of which some master ran it
  double makespan_ratio = 0;  // makespan / max(critical path, work / workers), in time
  bool has_best = false;
  int64_t best_trial = 0;  // number within the study
  json best_params;
  std::string metric;
  double best_value = 0;
  int64_t best_step = 0;
  // With several objectives, in place of the best: the Pareto-optimal feasible trials, each
  // {"trial", "params", "values": {metric: value}, "step"} (`hippo best`'s JSON).
  std::optional<json> front;
  void set_best(const TrackedTrial& t, double value, int64_t step);
  double master_ms_per_trial = 0;  // the master's own CPU time (events, bookkeeping) per trial
  TimeSplit time;                  // where each worker's time went over wall_s (time_split.h)
  json to_json() const;
};

struct Progress {
  int64_t trials = 0, trials_closed = 0;
  int64_t steps_unique = 0, steps_trained = 0;  // of this study's part of the tree
  double elapsed_s = 0;
};

Progress progress(const StudyDriver& driver, const StageTree& tree, int64_t study);
// `workers`: how many workers the makespan's lower bound spreads the work over.
StudySummary summarize(const StudyDriver& driver, const StageTree& tree, SearchPlan& plan,
                       int64_t study, int64_t workers);
// For `hippo workers`: name, device, devices, threads, pid, seconds since it was last heard, the
// states it holds, and its job (studies, trial, steps) if busy.
json workers_json(const WorkerPool& pool, const StudyDriver& driver);

}  // namespace hippo::master
