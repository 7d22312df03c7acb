#include "dashboard/model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "master/reports.h"
#include "searchers/pareto.h"

namespace hippo::dashboard {
namespace {

// The stages on the study's trials' paths, each parent before its children (pre-order from the
// top stages, children in creation order).
std::vector<StageId> study_stages(const StageTree& tree, const std::vector<char>& on_paths) {
  std::vector<StageId> order;
  std::vector<StageId> todo;
  for (StageId top : tree.top_stages())
    if (on_paths[top]) todo.push_back(top);
  std::reverse(todo.begin(), todo.end());
  while (!todo.empty()) {
    StageId s = todo.back();
    todo.pop_back();
    order.push_back(s);
    const auto& children = tree.stage(s).children;
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      if (on_paths[*it]) todo.push_back(*it);
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

// A study's rows as the plan holds them: its trials by number, each with its metrics by (step,
// name), and the executions that served it, by start.
struct TrialRows {
  TrialRow row;
  std::vector<MetricRow> metrics;
};
struct StudyRows {
  std::vector<TrialRows> trials;
  std::vector<ExecutionRow> executions;
};
using Checkpoints = std::map<StageId, std::vector<int64_t>>;

// Each trial's result and the Pareto front as `hippo best` finds them (master::trial_results,
// pareto_optimal); the best of one objective under constraints is its first optimal result.
void read_results(StudyView& v, const StudyRows& rows,
                  const std::unordered_map<TrialId, size_t>& index) {
  std::set<TrialId> diverged;
  for (const TrialView& t : v.trials)
    if (t.row.status == TrialStatus::kDiverged) diverged.insert(t.row.id);
  std::vector<master::TrialResult> results;
  for (const TrialRows& t : rows.trials)  // a trial's result rests on its own metrics only
    for (master::TrialResult& r : master::trial_results(t.metrics, v.goals, diverged))
      results.push_back(std::move(r));
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

// The view of one study, computed from its rows and the plan's stage tree (no plan read). The
// trials' and executions' rows move into it when `take` (a read that keeps no rows), else they
// are copied (PlanReader keeps them for its next read); their metrics are only read, never copied.
// `tree_of` gives the tree once the trials' rows are taken: a read of one study loads it only
// then (its rows, let go, leave it room); `plan_ids` there is the plan's id of each of its stages
// (a study's tree, load_study_tree), or empty when the tree's ids are the plan's.
struct TreeRef {
  const StageTree& tree;
  const std::vector<StageId>& plan_ids;
};
StudyView study_view(const StudyRow& row, StudyRows& rows, bool take,
                     const std::function<TreeRef()>& tree_of, const Checkpoints& checkpoints,
                     double now) {
  StudyView v;
  v.row = row;
  v.goals = goals_in(row.spec);
  v.metric = v.goals.objectives[0].metric;
  v.maximize = v.goals.objectives[0].maximize;
  if (take) {
    v.executions = std::move(rows.executions);
  } else {
    v.executions = rows.executions;
  }
  const bool running = row.status == StudyStatus::kRunning;

  std::unordered_map<TrialId, size_t> index;
  v.trials.reserve(rows.trials.size());
  for (TrialRows& t : rows.trials) {
    index[t.row.id] = v.trials.size();
    v.trials.push_back(
        {take ? std::move(t.row) : TrialRow(t.row), {}, {}, std::nullopt, 0, 0, std::nullopt});
  }
  std::vector<const nlohmann::json*> params;
  for (const TrialView& t : v.trials) params.push_back(&t.row.params);
  v.param_names = master::param_order(row.spec, params);
  for (size_t i = 0; i < rows.trials.size(); ++i) {
    TrialView& t = v.trials[i];
    for (const MetricRow& m : rows.trials[i].metrics) {
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
  }
  if (v.goals.multi()) read_results(v, rows, index);
  if (take) rows.trials = {};  // what is left of them (their metrics): not needed any more
  const auto [tree, plan_ids] = tree_of();

  // Steps as the master counts them (Master::summary): a stopped trial needs what it had been
  // trained to, a diverged one the step it diverged at, every other its length.
  // Per stage id (ids are dense): vectors, not maps, for 100,000 trials' paths.
  const size_t stage_count = tree.stages().size();
  std::map<TrialId, int64_t> needed;  // by trial id, for the tree's needed_steps
  std::vector<char> on_paths(stage_count, 0);
  std::vector<std::vector<StageId>> paths(v.trials.size());
  for (size_t i = 0; i < v.trials.size(); ++i) {
    TrialView& t = v.trials[i];
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
    paths[i] = tree.path(r.id);
    for (StageId s : paths[i]) on_paths[s] = 1;
  }
  StageTree::NeededSteps steps = tree.needed_steps(needed);
  v.steps_unique = steps.unique;
  v.steps_trained = steps.trained;
  for (const ExecutionRow& e : v.executions) v.steps_executed += e.reached - e.from;
  v.wall_s = std::max(0.0, (row.ended_at ? *row.ended_at : now) - row.created_at);

  // The stages: what this study needs of each, and what its still running trials need.
  std::vector<int64_t> needed_end(stage_count, 0), active_end(stage_count, 0),
      through(stage_count, 0);
  std::vector<std::vector<int64_t>> ending(stage_count);
  TrialId longest = -1;  // the trial that needs the most steps: its path is the critical path
  int64_t longest_needed = -1;
  for (size_t i = 0; i < v.trials.size(); ++i) {
    const TrialView& t = v.trials[i];
    const TrialRow& r = t.row;
    if (!tree.has_trial(r.id)) continue;
    if (t.needed > longest_needed) {
      longest = r.id;
      longest_needed = t.needed;
    }
    const bool active =
        running && (r.status == TrialStatus::kPending || r.status == TrialStatus::kRunning);
    const std::vector<StageId>& path = paths[i];
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
    if (!plan_ids.empty()) {
      s.stage.id = plan_ids[s.stage.id];
      if (s.stage.parent != kNoStage) s.stage.parent = plan_ids[s.stage.parent];
      for (StageId& child : s.stage.children) child = plan_ids[child];
    }
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
    s.trials_ending = std::move(ending[id]);
    std::sort(s.trials_ending.begin(), s.trials_ending.end());
    s.trials_through = through[id];
    auto c = checkpoints.find(s.stage.id);
    if (c != checkpoints.end()) s.checkpoints = c->second;
    s.on_critical_path = critical.count(id) != 0;
    v.stages.push_back(std::move(s));
  }
  return v;
}

// A study's rows from the plan, in the snapshot open; the trials' hyper-parameters are the tree's
// (no page shows them), not kept.
StudyRows read_rows(SearchPlan& plan, int64_t study, std::vector<ExecutionRow> executions,
                    ParsedTrialValues* parsed) {
  StudyRows rows;
  std::unordered_map<TrialId, size_t> index;
  {
    std::vector<TrialRow> trials = plan.trials(study, parsed);
    rows.trials.reserve(trials.size());
    for (TrialRow& t : trials) {
      index[t.id] = rows.trials.size();
      t.hyperparams = {};
      rows.trials.push_back({std::move(t), {}});
    }
  }  // (what is left of `trials` goes before the metrics come)
  for (MetricRow& m : plan.study_metrics(study)) {
    auto it = index.find(m.trial);
    if (it != index.end()) rows.trials[it->second].metrics.push_back(std::move(m));
  }
  rows.executions = std::move(executions);
  return rows;
}

}  // namespace

PlanView read_plan(SearchPlan& plan, double now, const std::string& only,
                   ParsedTrialValues* parsed) {
  // Reading every study, the tree's parse of the trials' values serves the studies' reads too;
  // reading one (hippo report), its trials' values are parsed twice rather than kept twice.
  ParsedTrialValues this_read;
  if (!parsed && only.empty()) parsed = &this_read;
  PlanView view;
  view.read_at = now;
  plan.snapshot([&] {
    view.version = plan.data_version();
    std::vector<StudyRow> rows = plan.studies(false);  // no page shows a searcher's state
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
    // One study: only the part of the tree that its trials live in (their root keys), and its
    // executions. (These reads join this snapshot.)
    const std::optional<int64_t> one = only.empty() ? std::nullopt : std::optional(rows[0].id);
    Checkpoints checkpoints;
    for (const CheckpointRow& c : one ? plan.study_tree_checkpoints(*one) : plan.checkpoints())
      checkpoints[c.stage].push_back(c.step);
    std::optional<StudyTree> tree;  // read when the first view asks for it
    auto tree_of = [&] {
      if (!tree)
        tree = one ? plan.load_study_tree(*one, parsed) : StudyTree{plan.load_tree(parsed), {}};
      return TreeRef{tree->tree, tree->plan_ids};
    };
    std::map<int64_t, std::vector<ExecutionRow>> executions;
    for (ExecutionRow& e : plan.executions(one)) {
      if (one) {
        executions[*one].push_back(std::move(e));  // (the others it served are not read)
        continue;
      }
      for (int64_t study : e.studies) executions[study].push_back(e);
    }
    for (const StudyRow& row : rows) {
      StudyRows study = read_rows(plan, row.id, std::move(executions[row.id]), parsed);
      view.studies.push_back(
          std::make_shared<StudyView>(study_view(row, study, true, tree_of, checkpoints, now)));
    }
  });
  return view;
}

// ---- PlanReader ----

namespace {

// Whether a study's own row differs in anything its view shows (the spec and the searcher's state
// are written once and by the master only: a spec never changes, the state is not shown).
bool same_row(const StudyRow& a, const StudyRow& b) {
  return a.name == b.name && a.policy == b.policy && a.status == b.status &&
         a.created_at == b.created_at && a.ended_at == b.ended_at && a.error == b.error &&
         a.account == b.account && a.remeasure == b.remeasure && a.spec == b.spec;
}

// Brings `tree` up to the plan's `changes`: adds and extends the changed trials as the master did
// (in id order), then checks every stage this touched and every stage the plan says changed
// against the plan's row, and takes the plan's training progress. False where they differ (the
// master added or extended them in another order): the tree is then to be restored whole.
bool bring_up_to_date(StageTree& tree, const PlanChanges& changes) {
  std::set<StageId> touched;
  auto note = [&](const Change& change) {
    touched.insert(change.created.begin(), change.created.end());
    touched.insert(change.extended.begin(), change.extended.end());
    for (const Split& split : change.splits) {
      touched.insert(split.stage);
      const std::vector<StageId>& moved = tree.stage(split.upper).children;  // re-parented
      touched.insert(moved.begin(), moved.end());
    }
  };
  try {
    for (const TrialRow& t : changes.trials) {
      if (!tree.has_trial(t.id)) {
        note(tree.add_trial(t.id, t.root_key, t.hyperparams, t.length));
      } else if (t.length < tree.trial(t.id).length) {
        return false;  // lengths only grow
      } else {
        note(tree.extend_trial(t.id, t.length));
      }
    }
  } catch (const std::exception&) {
    return false;
  }
  for (const Stage& stored : changes.stages) {
    if (stored.id < 0 || stored.id >= static_cast<StageId>(tree.stages().size())) return false;
    const Stage& s = tree.stage(stored.id);
    if (s.root_key != stored.root_key || s.parent != stored.parent || s.start != stored.start ||
        s.end != stored.end || s.representative != stored.representative ||
        s.trained_until > stored.trained_until)
      return false;
    tree.mark_trained(stored.id, stored.trained_until);
    touched.erase(stored.id);
  }
  return touched.empty();
}

}  // namespace

const std::vector<StageId> kPlanIds;  // (none: the kept tree's ids are the plan's)

struct PlanReader::State {
  struct Study {
    StudyRow row;
    StudyRows rows;
    std::unordered_set<StageId> stages;  // those its view shows
    std::shared_ptr<const StudyView> view;
  };
  int64_t number = -1;  // the plan's change number at the last read (-1: none yet)
  std::optional<int64_t> last_execution;
  std::optional<StageTree> tree;
  Checkpoints checkpoints;
  std::map<int64_t, Study> studies;  // by id; only those not deleted, after a read
  ParsedTrialValues parsed;
};

PlanReader::PlanReader() : state_(std::make_unique<State>()) {}
PlanReader::~PlanReader() = default;
PlanReader::PlanReader(PlanReader&&) noexcept = default;
PlanReader& PlanReader::operator=(PlanReader&&) noexcept = default;

PlanView PlanReader::read(SearchPlan& plan, double now) {
  work_ = Work{};
  if (!plan.has_change_marks()) {
    PlanView view = read_plan(plan, now, "", &state_->parsed);
    work_.studies_computed = view.studies.size();
    work_.tree_restored = true;
    return view;
  }
  State& s = *state_;
  PlanView view;
  view.read_at = now;
  try {
    plan.snapshot([&] {
      view.version = plan.data_version();
      const PlanChanges changes = plan.changes_since(s.number, &s.parsed);
      const std::vector<StudyRow> rows = plan.studies(false);  // no page shows a searcher's state
      std::vector<ExecutionRow> executions = plan.executions(std::nullopt, s.last_execution);
      work_.trials_read = changes.trials.size();

      // The tree, and the checkpoints of the stages that changed.
      if (!s.tree || !bring_up_to_date(*s.tree, changes)) {
        s.tree = plan.load_tree(&s.parsed);  // joins this snapshot
        work_.tree_restored = true;
      }
      std::set<StageId> stages;
      for (const Stage& st : changes.stages) {
        stages.insert(st.id);
        s.checkpoints.erase(st.id);
      }
      for (const CheckpointRow& c : changes.checkpoints) s.checkpoints[c.stage].push_back(c.step);

      // The changed trials, each with all its metrics, in their studies.
      std::set<int64_t> changed;
      auto metric = changes.metrics.begin();
      for (const TrialRow& t : changes.trials) {
        TrialRows entry{t, {}};
        entry.row.hyperparams = {};  // the tree's (no page shows them)
        for (; metric != changes.metrics.end() && metric->trial <= t.id; ++metric)
          if (metric->trial == t.id) entry.metrics.push_back(*metric);
        std::vector<TrialRows>& trials = s.studies[t.study_id].rows.trials;
        const size_t at = static_cast<size_t>(t.number - 1);
        auto place = at < trials.size() && trials[at].row.number == t.number
                         ? trials.begin() + static_cast<ptrdiff_t>(at)
                         : std::lower_bound(trials.begin(), trials.end(), t.number,
                                            [](const TrialRows& r, int64_t number) {
                                              return r.row.number < number;
                                            });
        if (place != trials.end() && place->row.number == t.number) {
          *place = std::move(entry);
        } else {
          trials.insert(place, std::move(entry));
        }
        changed.insert(t.study_id);
      }
      for (ExecutionRow& e : executions) {
        s.last_execution = std::max(s.last_execution.value_or(e.id), e.id);
        for (int64_t study : e.studies) {
          s.studies[study].rows.executions.push_back(e);
          changed.insert(study);
        }
      }

      // The studies: those whose rows, stages or own row changed are computed again.
      std::map<int64_t, State::Study> present;
      for (const StudyRow& row : rows) {
        State::Study& study = present[row.id] = std::move(s.studies[row.id]);
        if (!study.view || !same_row(study.row, row)) changed.insert(row.id);
        for (StageId id : stages)
          if (study.stages.count(id)) changed.insert(row.id);
        study.row = row;
        if (!changed.count(row.id)) continue;
        std::stable_sort(study.rows.executions.begin(), study.rows.executions.end(),
                         [](const ExecutionRow& a, const ExecutionRow& b) {
                           return std::tie(a.started_at, a.id) < std::tie(b.started_at, b.id);
                         });
        auto v = std::make_shared<StudyView>(study_view(
            row, study.rows, false,
            [&] {
              return TreeRef{*s.tree, kPlanIds};
            },
            s.checkpoints, now));
        study.stages.clear();
        for (const StageView& st : v->stages) study.stages.insert(st.stage.id);
        study.view = std::move(v);
        ++work_.studies_computed;
      }
      s.studies = std::move(present);  // deleted studies go
      for (const auto& [id, study] : s.studies) view.studies.push_back(study.view);
      s.number = changes.number;
    });
  } catch (...) {
    // What was kept may be half brought up to date: the next read starts afresh.
    ParsedTrialValues parsed = std::move(s.parsed);
    s = State{};
    s.parsed = std::move(parsed);
    throw;
  }
  return view;
}

}  // namespace hippo::dashboard
