#include "master/warm_start.h"

#include <cmath>
#include <map>

#include "searchers/field.h"

namespace hippo::master {
namespace {

using nlohmann::json;

// The earlier study's first objective, from its stored spec: (metric, mode).
std::pair<std::string, std::string> objective_of(const json& spec) {
  const json& searcher = spec.value("searcher", json::object());
  const json& first = searcher.contains("objectives") && searcher["objectives"].is_array() &&
                              !searcher["objectives"].empty()
                          ? searcher["objectives"][0]
                          : searcher;
  return {first.value("metric", ""), first.value("mode", "")};
}

}  // namespace

WarmStart resolve_warm_start(const StudySpec& spec, const json& spec_json, SearchPlan& plan) {
  WarmStart out{spec_json, {}};
  if (spec.warm_start.empty()) return out;
  Field warm(spec_json["warm_start"], "warm_start");
  if (warm.has("evaluations"))
    warm["evaluations"].fail(
        "hippo writes them when the study is submitted, from warm_start.studies: leave them out");
  const std::string mode = spec.searcher.maximize ? "max" : "min";
  json evaluations = json::array();
  for (size_t i = 0; i < spec.warm_start.size(); ++i) {
    Field at = warm["studies"][i];
    const std::string& name = spec.warm_start[i];
    std::optional<StudyRow> row = plan.study_by_name(name);
    if (!row) at.fail("no study \"" + name + "\" in this plan");
    if (auto [metric, its_mode] = objective_of(row->spec);
        metric != spec.searcher.metric || its_mode != mode)
      at.fail("study " + name + " searched " + metric + " (" + its_mode + "), this study " +
              spec.searcher.metric + " (" + mode + "): its evaluations cannot seed this one");
    std::map<TrialId, std::map<int64_t, double>> values;
    for (const MetricRow& m : plan.study_metrics(row->id))
      if (m.name == spec.searcher.metric && std::isfinite(m.value))
        values[m.trial][m.step] = m.value;
    PriorStudy counts{name};
    for (const TrialRow& t : plan.trials(row->id)) {
      json params = json::object();
      for (const Param& p : spec.space.params()) {
        if (!t.params.contains(p.name))
          at.fail("study " + name + " has no leaf " + p.name +
                  " (it did not search it): a warm start needs a value of every leaf of this "
                  "study");
        params[p.name] = t.params[p.name];
      }
      auto measured = values.find(t.id);
      if (measured == values.end()) continue;
      try {
        spec.check_params(params);
      } catch (const SpecError&) {
        ++counts.left_out;
        continue;
      }
      json steps = json::array();
      for (const auto& [step, value] : measured->second) steps.push_back({step, value});
      evaluations.push_back(
          {{"study", name}, {"trial", t.number}, {"params", params}, {"values", steps}});
      ++counts.trials;
      counts.evaluations += static_cast<int64_t>(measured->second.size());
    }
    if (counts.trials == 0)
      at.fail("study " + name + " has no evaluation of " + spec.searcher.metric +
              " inside this study's space" +
              (counts.left_out ? " (" + std::to_string(counts.left_out) +
                                     " of its evaluated trials lie outside it)"
                               : ""));
    out.studies.push_back(counts);
  }
  out.spec["warm_start"]["evaluations"] = std::move(evaluations);
  return out;
}

json as_written(const json& stored) {
  json out = stored;
  if (out.is_object() && out.contains("warm_start") && out["warm_start"].is_object())
    out["warm_start"].erase("evaluations");
  return out;
}

}  // namespace hippo::master
