#include "master/reports.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

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

json StudySummary::to_json() const {
  json j{{"study", name},
         {"status", status},
         {"trials", trials},
         {"steps_trial_based", steps_trial_based},
         {"steps_unique", steps_unique},
         {"steps_executed", steps_executed},
         {"steps_reused", steps_reused},
         {"critical_path_steps", critical_path_steps},
         {"bytes_moved", bytes_moved},
         {"transfer_s", std::round(transfer_s * 1000) / 1000},
         {"wall_s", std::round(wall_s * 1000) / 1000},
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
  std::map<TrialId, int64_t> history;  // trial -> the prefix of it that history covered
  int64_t longest_left = 0;            // the critical path of what history did not cover
  for (const auto& [req, tid] : s.trials) {
    const TrackedTrial& t = *driver.trial(tid);
    const int64_t needed = t.needed_length(), covered = std::min(t.history_steps, needed);
    out.steps_trial_based += needed;
    out.critical_path_steps = std::max(out.critical_path_steps, needed);
    longest_left = std::max(longest_left, needed - covered);
    if (t.in_tree && covered > 0) history[tid] = covered;
  }
  out.steps_reused = tree.needed_steps(history).unique;
  out.wall_s = s.run_s();
  // Lower bounds of the makespan, in seconds: the critical path, and the work spread over all
  // workers (both without what history covered), at the measured time per step of this study.
  const StudyAccount& a = s.account;
  double per_step = a.steps_executed > 0 ? a.busy_s / static_cast<double>(a.steps_executed) : 0;
  double spread = std::max<double>(1, static_cast<double>(workers));
  double bound = per_step * std::max<double>(static_cast<double>(longest_left),
                                             (out.steps_unique - out.steps_reused) / spread);
  out.makespan_ratio = bound > 0 ? out.wall_s / bound : 0;
  out.master_ms_per_trial = p.trials > 0 ? 1000 * a.master_s / p.trials : 0;
  out.time = split_time(plan.executions(study), out.wall_s);
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
