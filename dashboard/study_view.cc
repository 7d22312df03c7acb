// The parts of model.h that need no plan: a view's own questions and the hypervolume history
// (the figures and the fuzz target over them use these without SQLite's reads or the master's
// rules).
#include <algorithm>
#include <cmath>
#include <set>

#include "dashboard/model.h"
#include "searchers/pareto.h"

namespace hippo::dashboard {
namespace {

// A result the hypervolume can measure: an infinite objective would make every volume infinite.
bool feasible_and_finite(const TrialView& t) {
  return t.result && t.result->feasible &&
         std::all_of(t.result->values.begin(), t.result->values.end(),
                     [](double v) { return std::isfinite(v); });
}

}  // namespace

const char* to_string(StageState state) {
  static const char* const names[] = {"trained", "training", "pending", "pruned"};
  return names[static_cast<int>(state)];
}

double StudyView::saving() const {
  return steps_unique > 0 ? static_cast<double>(steps_trial_based) / steps_unique : 0;
}

std::vector<std::string> StudyView::parameter_names() const {
  std::vector<std::string> names = param_names;
  std::set<std::string> known(names.begin(), names.end()), others;
  for (const TrialView& t : trials)
    if (t.row.params.is_object())
      for (const auto& [name, value] : t.row.params.items())
        if (!known.count(name)) others.insert(name);
  names.insert(names.end(), others.begin(), others.end());
  return names;
}

const TrialView* StudyView::trial(int64_t number) const {
  if (number < 1 || number > static_cast<int64_t>(trials.size())) return nullptr;
  const TrialView& t = trials[number - 1];  // numbers are 1, 2, ... in order
  return t.row.number == number ? &t : nullptr;
}

std::shared_ptr<const StudyView> PlanView::find(const std::string& name_or_id) const {
  for (const auto& s : studies)
    if (s->row.name == name_or_id) return s;
  if (std::optional<int64_t> id = study_id_in(name_or_id))
    for (const auto& s : studies)
      if (s->row.id == *id) return s;
  return nullptr;
}

HypervolumeHistory hypervolume_history(const StudyView& study, size_t max_points) {
  HypervolumeHistory history;
  const size_t objectives = study.goals.objectives.size();
  if (objectives < 2 || objectives > kMaxHypervolumeObjectives || study.trials.empty())
    return history;
  const Directions directions = study.goals.directions();
  std::vector<std::vector<double>> feasible;
  for (const TrialView& t : study.trials)
    if (feasible_and_finite(t)) feasible.push_back(t.result->values);
  std::optional<std::vector<double>> reference = hypervolume_reference(feasible, directions);
  if (!reference) return history;
  history.reference = std::move(*reference);
  const size_t n = study.trials.size();
  const size_t every = (n + std::max<size_t>(1, max_points) - 1) / std::max<size_t>(1, max_points);
  // A result that earlier trials dominate stays dominated: the front so far and the results
  // since are all the next front needs, which keeps each step to the front's size.
  std::vector<ParetoPoint> front;
  for (size_t i = 0; i < n; ++i) {
    const TrialView& t = study.trials[i];
    if (feasible_and_finite(t)) front.push_back({t.result->values, 0});
    if ((i + 1) % every != 0 && i + 1 != n) continue;
    std::vector<ParetoPoint> kept;
    std::vector<std::vector<double>> values;
    for (size_t k : pareto_front(front, directions)) {
      values.push_back(front[k].values);
      kept.push_back(std::move(front[k]));
    }
    front = std::move(kept);
    history.points.emplace_back(t.row.number, hypervolume(values, history.reference, directions));
  }
  return history;
}

}  // namespace hippo::dashboard
