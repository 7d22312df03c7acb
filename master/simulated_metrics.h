// What a simulated evaluation reports (simulator.h): a synthetic learning curve, or the metrics
// that a finished study of the same spec measured (a tabular benchmark). Either way a state's
// metrics depend only on the hyper-parameter values on [0, step) and on step, as they do in
// training: trials that share a state share its metrics.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "searchers/spec.h"
#include "stagetree/sequence.h"

namespace hippo::master {

class MetricModel {
 public:
  virtual ~MetricModel() = default;
  // The metrics of the state after `step` steps of training a trial of `spec` of the architecture
  // `root_key` (StudySpec::architectures) with `hyperparams`: at least the spec's objective
  // metric. Throws std::runtime_error when the model has none for it.
  virtual nlohmann::json metrics(const StudySpec& spec, const std::string& root_key,
                                 const Hyperparams& hyperparams, int64_t step) = 0;
  // A trial's own seconds per training step and per evaluation where the model measured them
  // (recorded_curves.h); nullopt: the simulation's times for its root key.
  struct StepTimes {
    double step_s = 0, eval_s = 0;
  };
  virtual std::optional<StepTimes> times(const StudySpec& /*spec*/, const std::string& /*root_key*/,
                                         const Hyperparams& /*hyperparams*/) {
    return std::nullopt;
  }
};

// A documented synthetic curve (no randomness, no state). For the state after s steps:
//   q    = the mean of fit(values at step floor(j * s / 8)) over j = 0..7, where
//          fit(values) = 0.5 + 0.5 * sin(sum over hyper-parameters of w(name) * log(|v| + 1e-9))
//          (w(name) in [1, 2) from a hash of the name; a text value counts as a hash of itself),
//          so that how good a schedule is depends on its values over the whole prefix;
//   A    = 0.55 + 0.4 * q                      the accuracy this schedule tends to
//   acc  = A - (A - 0.1) * exp(-s / tau)       tau = curve_steps / 3
//   loss = -log(acc)
// Any other metric the goals read (an external trainer's) gets acc when it is an objective to
// maximize, else loss.
// Every architecture of a study has the same curves.
class SyntheticCurves : public MetricModel {
 public:
  explicit SyntheticCurves(double curve_steps = 1000) : tau_(curve_steps / 3) {}
  nlohmann::json metrics(const StudySpec& spec, const std::string& root_key,
                         const Hyperparams& hyperparams, int64_t step) override;

 private:
  double tau_;
};

// The metrics that a plan file's studies measured, replayed: a state's metrics (every one its
// trial recorded: `params` too) are those of a stored trial with the same root key (its
// architecture's), the same values on [0, step), and a metric at `step`.
class ReplayedMetrics : public MetricModel {
 public:
  // Reads every study of the plan at `path` (read-only). Throws std::runtime_error for a file
  // that is not a plan or holds no metric.
  explicit ReplayedMetrics(const std::string& path);
  nlohmann::json metrics(const StudySpec& spec, const std::string& root_key,
                         const Hyperparams& hyperparams, int64_t step) override;

 private:
  struct Trial {
    Hyperparams hyperparams;
    std::map<int64_t, nlohmann::json> metrics;  // step -> {name: value}
  };
  std::string path_;
  std::map<std::string, std::vector<Trial>> by_root_key_;
  // root key + the hyper-parameters' JSON -> index in by_root_key_ (the common exact match)
  std::map<std::string, size_t> exact_;
};

}  // namespace hippo::master
