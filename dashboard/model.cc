#include "dashboard/model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "master/reports.h"
#include "searchers/pareto.h"

namespace hippo::dashboard {
namespace {

// The stages on the study's trials' paths, each parent before its children (pre-order from the
// top stages, children in creation order).
std::vector<StageId> study_stages(const StageTree& tree, const std::set<StageId>& on_paths) {
  std::vector<StageId> order;
  std::vector<StageId> todo;
  for (StageId top : tree.top_stages())
    if (on_paths.count(top)) todo.push_back(top);
  std::reverse(todo.begin(), todo.end());
  while (!todo.empty()) {
    StageId s = todo.back();
    todo.pop_back();
    order.push_back(s);
    const auto& children = tree.stage(s).children;
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      if (on_paths.count(*it)) todo.push_back(*it);
  }
  return order;
}

// What the stored spec optimizes; a spec that goals_of refuses (written by hand, before
// objectives existed) keeps what the dashboard always read: searcher.metric and mode.
Goals goals_in(const nlohmann::json& spec) {
  try {
    return goals_of(spec);
  } catch (const std::exception&) {
    const nlohmann::json searcher = spec.value("searcher", nlohmann::json::object());
    Objective objective{"accuracy", true};
    if (searcher.is_object()) {
      objective.metric = searcher.value("metric", objective.metric);
      objective.maximize = searcher.value("mode", std::string("max")) != "min";
    }
    return Goals{{objective}, {}};
  }
}

// Each trial's result and the Pareto front as `hippo best` finds them (master::trial_results,
// pareto_optimal); the best of one objective under constraints is its first optimal result.
void read_results(StudyView& v, const std::vector<MetricRow>& metrics,
                  const std::unordered_map<TrialId, size_t>& index) {
  std::set<TrialId> diverged;
  for (const TrialView& t : v.trials)
    if (t.row.status == TrialStatus::kDiverged) diverged.insert(t.row.id);
  const std::vector<master::TrialResult> results =
      master::trial_results(metrics, v.goals, diverged);
  for (const master::TrialResult& r : results) {
    auto it = index.find(r.trial);
    if (it != index.end())
      v.trials[it->second].result = GoalResult{r.step, r.values, r.violation, r.feasible(), false};
  }
  v.best.reset();
  for (const master::TrialResult& r : master::pareto_optimal(results, v.goals)) {
    auto it = index.find(r.trial);
    if (it == index.end()) continue;
    TrialView& t = v.trials[it->second];
    t.result->pareto_optimal = true;
    v.front.push_back(t.row.number);
    if (!v.goals.several() && !v.best) v.best = StudyView::Best{t.row.number, r.values[0], r.step};
  }
  std::sort(v.front.begin(), v.front.end());
}

StudyView read_study(SearchPlan& plan, const StudyRow& row, const StageTree& tree,
                     const std::map<StageId, std::vector<int64_t>>& checkpoints,
                     std::vector<ExecutionRow> executions, double now, ParsedTrialValues* parsed) {
  StudyView v;
  v.row = row;
  v.goals = goals_in(row.spec);
  v.metric = v.goals.objectives[0].metric;
  v.maximize = v.goals.objectives[0].maximize;
  v.executions = std::move(executions);
  const bool running = row.status == StudyStatus::kRunning;

  std::unordered_map<TrialId, size_t> index;
  for (TrialRow& t : plan.trials(row.id, parsed)) {
    index[t.id] = v.trials.size();
    v.trials.push_back({std::move(t), {}, {}, std::nullopt, 0, 0, std::nullopt});
  }
  std::vector<const nlohmann::json*> params;
  for (const TrialView& t : v.trials) params.push_back(&t.row.params);
  v.param_names = master::param_order(row.spec, params);
  const std::vector<MetricRow> metrics = plan.study_metrics(row.id);
  for (const MetricRow& m : metrics) {
    auto it = index.find(m.trial);
    if (it == index.end()) continue;
    TrialView& t = v.trials[it->second];
    t.last[m.name] = m.value;  // rows come by step: the last one stays
    // A diverged trial's values are drawn up to where it diverged, and it is never the best.
    if (m.name != v.metric) continue;
    if (!std::isfinite(m.value)) {
      ++v.not_finite;
      continue;
    }
    t.curve.emplace_back(m.step, m.value);
    if (t.row.status == TrialStatus::kDiverged) continue;
    if (!t.best || better(m.value, *t.best, v.maximize)) t.best = m.value;
    if (!v.best || better(m.value, v.best->value, v.maximize))
      v.best = StudyView::Best{t.row.number, m.value, m.step};
  }
  if (v.goals.multi()) read_results(v, metrics, index);

  // Steps as the master counts them (Master::summary): a stopped trial needs what it had been
  // trained to, a diverged one the step it diverged at, every other its length.
  std::map<TrialId, int64_t> needed;  // by trial id, for the tree's needed_steps
  std::set<StageId> on_paths;
  for (TrialView& t : v.trials) {
    const TrialRow& r = t.row;
    if (r.status != TrialStatus::kPending && r.status != TrialStatus::kRunning) ++v.trials_closed;
    if (!tree.has_trial(r.id)) continue;
    t.trained = tree.trained_length(r.id);
    t.needed = r.status == TrialStatus::kStopped ? std::min(r.length, t.trained)
               : r.status == TrialStatus::kDiverged
                   ? std::min(r.length, r.end_step.value_or(t.trained))
                   : r.length;
    needed[r.id] = t.needed;
    v.steps_trial_based += t.needed;
    v.critical_path_steps = std::max(v.critical_path_steps, t.needed);
    for (StageId s : tree.path(r.id)) on_paths.insert(s);
  }
  StageTree::NeededSteps steps = tree.needed_steps(needed);
  v.steps_unique = steps.unique;
  v.steps_trained = steps.trained;
  for (const ExecutionRow& e : v.executions) v.steps_executed += e.reached - e.from;
  v.wall_s = std::max(0.0, (row.ended_at ? *row.ended_at : now) - row.created_at);

  // The stages: what this study needs of each, and what its still running trials need.
  std::unordered_map<StageId, int64_t> needed_end, active_end, through;
  std::unordered_map<StageId, std::vector<int64_t>> ending;
  TrialId longest = -1;  // the trial that needs the most steps: its path is the critical path
  int64_t longest_needed = -1;
  for (const TrialView& t : v.trials) {
    const TrialRow& r = t.row;
    if (!tree.has_trial(r.id)) continue;
    if (t.needed > longest_needed) {
      longest = r.id;
      longest_needed = t.needed;
    }
    const bool active =
        running && (r.status == TrialStatus::kPending || r.status == TrialStatus::kRunning);
    std::vector<StageId> path = tree.path(r.id);
    ending[path.back()].push_back(r.number);
    for (StageId s : path) {
      const Stage& x = tree.stage(s);
      ++through[s];
      int64_t end = std::clamp(t.needed, x.start, x.end);
      needed_end[s] = std::max(needed_end[s], end);
      if (active) active_end[s] = std::max(active_end[s], std::min(r.length, x.end));
    }
  }
  std::set<StageId> critical;
  if (longest >= 0)
    for (StageId s : tree.path(longest)) critical.insert(s);
  for (StageId id : study_stages(tree, on_paths)) {
    StageView s;
    s.stage = tree.stage(id);
    s.needed_end = std::max(needed_end[id], s.stage.start);
    const int64_t trained = s.stage.trained_until;
    if (trained >= s.stage.end) {
      s.state = StageState::kTrained;
    } else if (active_end[id] > trained) {
      s.state = trained > s.stage.start ? StageState::kTraining : StageState::kPending;
    } else if (s.needed_end > s.stage.start && trained >= s.needed_end) {
      s.state = StageState::kTrained;  // what is needed is trained; the rest was pruned
    } else {
      s.state = StageState::kPruned;
    }
    s.trials_ending = ending[id];
    std::sort(s.trials_ending.begin(), s.trials_ending.end());
    s.trials_through = through[id];
    auto c = checkpoints.find(id);
    if (c != checkpoints.end()) s.checkpoints = c->second;
    s.on_critical_path = critical.count(id) != 0;
    v.stages.push_back(std::move(s));
  }
  return v;
}

}  // namespace

PlanView read_plan(SearchPlan& plan, double now, const std::string& only,
                   ParsedTrialValues* parsed) {
  // Within one read, the tree's parse of the trials' values serves the studies' reads too.
  ParsedTrialValues this_read;
  if (!parsed) parsed = &this_read;
  PlanView view;
  view.read_at = now;
  plan.snapshot([&] {
    view.version = plan.data_version();
    std::vector<StudyRow> rows = plan.studies();
    if (!only.empty()) {
      // The study named, by its name or else its id (PlanView::find's rule).
      auto named =
          std::find_if(rows.begin(), rows.end(), [&](const StudyRow& r) { return r.name == only; });
      const std::optional<int64_t> id = study_id_in(only);
      if (named == rows.end() && id)
        named =
            std::find_if(rows.begin(), rows.end(), [&](const StudyRow& r) { return r.id == *id; });
      rows = named == rows.end() ? std::vector<StudyRow>{} : std::vector<StudyRow>{*named};
      if (rows.empty()) return;
    }
    StageTree tree = plan.load_tree(parsed);  // joins this snapshot
    std::map<StageId, std::vector<int64_t>> checkpoints;
    for (const CheckpointRow& c : plan.checkpoints()) checkpoints[c.stage].push_back(c.step);
    std::map<int64_t, std::vector<ExecutionRow>> executions;
    for (ExecutionRow& e :
         plan.executions(only.empty() ? std::nullopt : std::optional<int64_t>(rows[0].id)))
      for (int64_t study : e.studies) executions[study].push_back(e);
    for (const StudyRow& row : rows)
      view.studies.push_back(std::make_shared<StudyView>(
          read_study(plan, row, tree, checkpoints, std::move(executions[row.id]), now, parsed)));
  });
  return view;
}

}  // namespace hippo::dashboard
