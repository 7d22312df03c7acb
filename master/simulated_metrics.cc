#include "master/simulated_metrics.h"

#include <cmath>
#include <stdexcept>

#include "stagetree/hash.h"
#include "stagetree/sequence_json.h"
#include "storage/plan.h"

namespace hippo::master {
namespace {

double unit(uint64_t h) {
  return static_cast<double>(h >> 11) / static_cast<double>(1ull << 53);
}

double fit(const Hyperparams& hyperparams, int64_t step) {
  double sum = 0;
  for (const auto& [name, seq] : hyperparams) {
    const double w = 1 + unit(fnv1a(name));
    const double v = seq.is_text() ? 1 + unit(fnv1a(seq.text_value())) * 100 : seq.value_at(step);
    sum += w * std::log(std::fabs(v) + 1e-9);
  }
  return 0.5 + 0.5 * std::sin(sum);
}

}  // namespace

nlohmann::json SyntheticCurves::metrics(const StudySpec& spec, const std::string& /*root_key*/,
                                        const Hyperparams& hyperparams, int64_t step) {
  double q = 0;
  for (int j = 0; j < 8; ++j) q += fit(hyperparams, j * step / 8) / 8;
  const double a = 0.55 + 0.4 * q;
  const double accuracy = a - (a - 0.1) * std::exp(-static_cast<double>(step) / tau_);
  const double loss = -std::log(accuracy);
  nlohmann::json out = {{"accuracy", accuracy}, {"loss", loss}};
  // An external trainer's metrics, by name: an objective to maximize follows the accuracy, any
  // other the loss, so that every metric the study's goals read is there.
  const Goals& goals = spec.searcher.goals;
  for (const Objective& o : goals.objectives)
    if (!out.contains(o.metric)) out[o.metric] = o.maximize ? accuracy : loss;
  for (const Constraint& c : goals.constraints)
    if (!out.contains(c.metric)) out[c.metric] = loss;
  return out;
}

ReplayedMetrics::ReplayedMetrics(const std::string& path) : path_(path) {
  SearchPlan plan = SearchPlan::open_read_only(path);
  int64_t count = 0;
  for (const StudyRow& study : plan.studies()) {
    const StudySpec spec = parse_spec(study.spec);
    // trial id -> its root key's trials in by_root_key_, and its place there
    std::map<TrialId, std::pair<std::vector<Trial>*, size_t>> index;
    for (const TrialRow& row : plan.trials(study.id)) {
      const std::string root_key = spec.root_key_of(row.params);
      std::vector<Trial>& trials = by_root_key_[root_key];
      const std::string key = root_key + to_json(row.hyperparams).dump();
      auto [at, fresh] = exact_.emplace(key, trials.size());
      if (fresh) trials.push_back({row.hyperparams, {}});
      index[row.id] = {&trials, at->second};
    }
    for (const MetricRow& m : plan.study_metrics(study.id)) {
      auto it = index.find(m.trial);
      if (it == index.end()) continue;
      auto [trials, place] = it->second;
      (*trials)[place].metrics[m.step][m.name] = m.value;
      ++count;
    }
  }
  if (count == 0) throw std::runtime_error(path + ": the plan holds no metric to replay");
}

nlohmann::json ReplayedMetrics::metrics(const StudySpec& spec, const std::string& root_key,
                                        const Hyperparams& hyperparams, int64_t step) {
  auto trials = by_root_key_.find(root_key);
  if (trials != by_root_key_.end()) {
    auto exact = exact_.find(root_key + to_json(hyperparams).dump());
    if (exact != exact_.end()) {
      const Trial& t = trials->second[exact->second];
      if (auto m = t.metrics.find(step); m != t.metrics.end()) return m->second;
    }
    // Another trial that shares this state: the same values before `step`.
    for (const Trial& t : trials->second) {
      auto m = t.metrics.find(step);
      if (m != t.metrics.end() && divergence_until(t.hyperparams, hyperparams, 0, step) == step)
        return m->second;
    }
  }
  throw std::runtime_error("--metrics-from " + path_ + ": no study of the plan measured study " +
                           spec.name + "'s state after " + std::to_string(step) +
                           " steps with these hyper-parameters (" + to_json(hyperparams).dump() +
                           "): replay a finished study of the same spec and searcher seed");
}

}  // namespace hippo::master
