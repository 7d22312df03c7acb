#include "master/reports.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "searchers/pareto.h"

namespace hippo::master {

std::optional<MetricRow> best_metric(const std::vector<MetricRow>& metrics,
                                     const Objective& objective,
                                     const std::set<TrialId>& diverged) {
  std::optional<MetricRow> best;
  for (const MetricRow& m : metrics) {
    if (m.name != objective.metric || !std::isfinite(m.value) || diverged.count(m.trial)) continue;
    if (!best || better(m.value, best->value, objective.maximize)) best = m;
  }
  return best;
}

std::vector<TrialResult> trial_results(const std::vector<MetricRow>& metrics, const Goals& goals,
                                       const std::set<TrialId>& diverged) {
  const std::vector<std::string> names = goals.metrics();
  // (trial, step) -> the goal metrics reported there; rows come by trial, then step.
  std::map<std::pair<TrialId, int64_t>, std::map<std::string, double>> at;
  for (const MetricRow& m : metrics)
    if (std::find(names.begin(), names.end(), m.name) != names.end())
      at[{m.trial, m.step}][m.name] = m.value;
  std::map<TrialId, TrialResult> last;
  for (const auto& [where, values] : at) {
    if (values.size() != names.size()) continue;
    TrialResult r;
    r.trial = where.first;
    r.step = where.second;
    for (const Objective& o : goals.objectives) r.values.push_back(values.at(o.metric));
    for (const Constraint& c : goals.constraints) r.violation += c.violation(values.at(c.metric));
    r.diverged = diverged.count(r.trial) > 0;
    last[r.trial] = std::move(r);  // later steps come later
  }
  std::vector<TrialResult> out;
  for (auto& [trial, r] : last) out.push_back(std::move(r));
  return out;
}

std::vector<TrialResult> pareto_optimal(const std::vector<TrialResult>& results,
                                        const Goals& goals) {
  std::vector<ParetoPoint> points;
  for (const TrialResult& r : results)
    points.push_back(
        {r.values, r.diverged ? std::numeric_limits<double>::infinity() : r.violation});
  std::vector<TrialResult> out;
  for (size_t i : pareto_front(points, goals.directions())) out.push_back(results[i]);
  return out;
}

json values_json(const TrialResult& r, const Goals& goals) {
  json values = json::object();
  for (size_t i = 0; i < goals.objectives.size(); ++i)
    values[goals.objectives[i].metric] = r.values[i];
  return values;
}

std::vector<std::string> param_order(const json& spec, const std::vector<const json*>& params) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  try {
    const StudySpec parsed = parse_spec(spec);
    for (const Param& leaf : parsed.space.params())
      if (seen.insert(leaf.name).second) order.push_back(leaf.name);
  } catch (const SpecError&) {
    // A spec stored by another version that this one refuses: the trials' names still show.
  }
  for (const json* p : params)
    if (p->is_object())
      for (const auto& [name, value] : p->items())
        if (seen.insert(name).second) order.push_back(name);
  return order;
}

nlohmann::ordered_json ordered_params(const json& params, const std::vector<std::string>& order) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& name : order)
    if (auto it = params.find(name); it != params.end()) out[name] = *it;
  for (const auto& [name, value] : params.items())
    if (!out.contains(name)) out[name] = value;
  return out;
}

json StudySummary::to_json() const {
  json j{{"study", name},
         {"status", status},
         {"trials", trials},
         {"steps_trial_based", steps_trial_based},
         {"steps_unique", steps_unique},
         {"steps_executed", steps_executed},
         {"steps_reused", steps_reused},
         {"steps_earlier_runs", steps_earlier_runs},
         {"steps_redone", steps_redone},
         {"steps_shared", steps_shared},
         {"critical_path_steps", critical_path_steps},
         {"bytes_moved", bytes_moved},
         {"transfer_s", std::round(transfer_s * 1000) / 1000},
         {"wall_s", std::round(wall_s * 1000) / 1000},
         {"active_s", std::round(active_s * 1000) / 1000},
         {"makespan_ratio", std::round(makespan_ratio * 1000) / 1000},
         {"master_ms_per_trial", std::round(master_ms_per_trial * 1000) / 1000},
         {"time", time.to_json()}};
  if (!error.empty()) j["error"] = error;
  if (front) j["front"] = *front;
  if (has_best)
    j["best"] = {{"trial", best_trial},
                 {"params", best_params},
                 {"metric", metric},
                 {"value", best_value},
                 {"step", best_step}};
  return j;
}

Progress progress(const StudyDriver& driver, const StageTree& tree, int64_t study) {
  Progress p;
  const TrackedStudy& s = driver.studies().at(study);
  std::map<TrialId, int64_t> needed;  // trial -> the steps this study needs of it
  for (const auto& [req, tid] : s.trials) {
    const TrackedTrial& t = *driver.trial(tid);
    ++p.trials;
    if (t.status != TrialStatus::kPending && t.status != TrialStatus::kRunning) ++p.trials_closed;
    if (t.in_tree) needed[tid] = t.needed_length();
  }
  StageTree::NeededSteps steps = tree.needed_steps(needed);
  p.steps_unique = steps.unique;
  p.steps_trained = steps.trained;
  p.elapsed_s = s.run_s();
  return p;
}

namespace {

// The steps of the study's needed paths that its own jobs trained (each once), those that its
// jobs that ended before `since` (unix seconds) trained, and those that its jobs trained for
// other studies too (a job serves every study whose trials need its stage): executions mapped
// onto the tree's stages, as unions of step ranges clipped to what the study needs.
struct OwnSteps {
  int64_t trained = 0, before = 0, shared = 0;
};
OwnSteps own_steps(const StageTree& tree, const std::map<TrialId, int64_t>& needed,
                   const std::vector<ExecutionRow>& executions, double since) {
  std::unordered_map<StageId, int64_t> needed_end;  // the study needs [start, end) of a stage
  for (const auto& [trial, length] : needed)
    for (StageId id : tree.path(trial)) {
      const Stage& x = tree.stage(id);
      if (x.start >= length) break;
      int64_t& end = needed_end[id];
      end = std::max(end, std::min(x.end, length));
    }
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  std::unordered_map<StageId, Ranges> all, early, shared;
  for (const ExecutionRow& e : executions) {
    if (e.reached <= e.from || !tree.has_trial(e.trial)) continue;
    for (StageId id : tree.path(e.trial)) {
      const Stage& x = tree.stage(id);
      if (x.start >= e.reached) break;
      auto it = needed_end.find(id);
      if (it == needed_end.end()) continue;
      const int64_t from = std::max(x.start, e.from), to = std::min(it->second, e.reached);
      if (from >= to) continue;
      all[id].push_back({from, to});
      if (e.ended_at < since) early[id].push_back({from, to});
      if (e.studies.size() > 1) shared[id].push_back({from, to});
    }
  }
  auto union_length = [](std::unordered_map<StageId, Ranges>& by_stage) {
    int64_t total = 0;
    for (auto& [id, ranges] : by_stage) {
      std::sort(ranges.begin(), ranges.end());
      int64_t reach = INT64_MIN;
      for (const auto& [from, to] : ranges) {
        const int64_t start = std::max(from, reach);
        if (to > start) total += to - start;
        reach = std::max(reach, to);
      }
    }
    return total;
  };
  return {union_length(all), union_length(early), union_length(shared)};
}

}  // namespace

StudySummary summarize(const StudyDriver& driver, const StageTree& tree, SearchPlan& plan,
                       int64_t study, int64_t workers) {
  const TrackedStudy& s = driver.studies().at(study);
  StudySummary out;
  out.study = s.id;
  out.name = s.spec.name;
  out.status = to_string(s.status);
  out.error = s.error;
  out.metric = s.spec.searcher.metric;
  Progress p = progress(driver, tree, study);
  out.trials = p.trials;
  out.steps_unique = p.steps_unique;
  // Over every master that ran it (the plan keeps the account): a restart's part and the part
  // before it.
  out.steps_executed = s.account.steps_executed;
  out.bytes_moved = s.account.bytes_moved;
  out.transfer_s = s.account.transfer_s;
  std::map<TrialId, int64_t> needed;  // trial -> the steps of its path the study needs
  int64_t longest_left = 0;           // the critical path of what history did not cover
  for (const auto& [req, tid] : s.trials) {
    const TrackedTrial& t = *driver.trial(tid);
    const int64_t length = t.needed_length(), covered = std::min(t.history_steps, length);
    out.steps_trial_based += length;
    out.critical_path_steps = std::max(out.critical_path_steps, length);
    longest_left = std::max(longest_left, length - covered);
    if (t.in_tree && length > 0) needed[tid] = length;
  }
  const std::vector<ExecutionRow> executions = plan.executions(study);
  const OwnSteps own = own_steps(tree, needed, executions, s.resumed_at);
  // Of what is trained so far (all of it, once the study is done), what its own jobs did not.
  out.steps_reused = std::max<int64_t>(0, p.steps_trained - own.trained);
  out.steps_earlier_runs = own.before;
  out.steps_shared = own.shared;
  out.steps_redone = std::max<int64_t>(0, out.steps_executed - own.trained);
  out.wall_s = s.wall_s();
  out.active_s = s.run_s();
  // Lower bounds of the makespan, in seconds: the critical path, and the work spread over all
  // workers (both without what history covered), at the measured time per step of this study.
  const StudyAccount& a = s.account;
  double per_step = a.steps_executed > 0 ? a.busy_s / static_cast<double>(a.steps_executed) : 0;
  double spread = std::max<double>(1, static_cast<double>(workers));
  double bound = per_step * std::max<double>(static_cast<double>(longest_left),
                                             (out.steps_unique - out.steps_reused) / spread);
  out.makespan_ratio = bound > 0 ? out.wall_s / bound : 0;
  out.master_ms_per_trial = p.trials > 0 ? 1000 * a.master_s / p.trials : 0;
  out.time = split_time(executions, out.wall_s);
  std::set<TrialId> diverged;
  for (const auto& [req, tid] : s.trials)
    if (driver.trial(tid)->status == TrialStatus::kDiverged) diverged.insert(tid);
  const Goals& goals = s.spec.searcher.goals;
  const std::vector<MetricRow> metrics = plan.study_metrics(study);
  if (!goals.multi()) {
    if (std::optional<MetricRow> best = best_metric(metrics, goals.objectives[0], diverged))
      out.set_best(*driver.trial(best->trial), best->value, best->step);
    return out;
  }
  const std::vector<TrialResult> optimal =
      pareto_optimal(trial_results(metrics, goals, diverged), goals);
  if (!goals.several()) {  // one objective under constraints: the first of its best
    if (!optimal.empty())
      out.set_best(*driver.trial(optimal[0].trial), optimal[0].values[0], optimal[0].step);
    return out;
  }
  out.front = json::array();
  for (const TrialResult& r : optimal) {
    const TrackedTrial& t = *driver.trial(r.trial);
    out.front->push_back({{"trial", t.number},
                          {"params", t.params},
                          {"values", values_json(r, goals)},
                          {"step", r.step}});
  }
  return out;
}

void StudySummary::set_best(const TrackedTrial& t, double value, int64_t step) {
  has_best = true;
  best_trial = t.number;
  best_params = t.params;
  best_value = value;
  best_step = step;
}

json workers_json(const WorkerPool& pool, const StudyDriver& driver) {
  json out = json::array();
  for (const auto& [peer, w] : pool.workers()) {
    json j{{"name", w.hello.name},
           {"device", w.hello.device},
           {"devices", w.hello.devices},
           {"threads", w.hello.threads},
           {"pid", w.hello.pid},
           {"last_seen_s", std::round(seconds_since(w.last_seen) * 10) / 10},
           {"states_held", w.held.size()}};
    if (!w.hello.storage.empty()) j["storage"] = w.hello.storage;
    if (!w.hello.environment.empty()) j["environment"] = w.hello.environment;
    if (w.hello.runs_trainers && !w.hello.trainer_environment.empty())
      j["trainer_environment"] = w.hello.trainer_environment;
    if (w.draining) j["draining"] = true;
    // Why it gets no work now: its own fault, or set aside after failures of its own.
    if (const std::string why = pool.unavailable(w); !why.empty() && !w.draining)
      j["unavailable"] = why;
    if (w.job >= 0) {
      const RunningJob& job = pool.jobs().at(w.job);
      json studies = json::array();
      for (int64_t id : job.studies)
        if (auto it = driver.studies().find(id); it != driver.studies().end())
          studies.push_back(it->second.spec.name);
      const TrackedTrial* trial = driver.trial(job.representative);
      j["job"] = {{"studies", studies},
                  {"trial", trial ? trial->number : -1},
                  {"from", job.order.from},
                  {"to", job.order.to},
                  {"step", std::max(job.progress_step, job.order.from)}};
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace hippo::master
