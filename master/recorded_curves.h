// Recorded learning curves replayed in simulated time (`hippo simulate --curves-from TABLE`,
// bench/curves/): a table of configurations that hippo trained for real (scripts/record-curves),
// each with its accuracy and loss after every epoch and its own measured seconds per training step
// and per evaluation. A simulated trial is served the curves of the recorded configuration nearest
// to its values, so that any searcher (over a continuous space) can run on a finite table.
//
// The table (gzip or plain text; tab-separated), line by line:
//   # hippo recorded curves v1                     the first line, exactly
//   # ...                                          comments
//   space NAME log|linear LO HI                    one per leaf, LO < HI (log: LO > 0)
//   config NAME... steps_per_epoch step_s eval_s epoch accuracy loss     the header: the leaves
//                                                  in the order of the space lines
//   then one row per configuration and epoch: config numbers 0, 1, ... in order, each with epochs
//   1, 2, ..., E (the same E for all), its leaves' values (finite, the same on all its rows),
//   steps_per_epoch >= 1, step_s > 0 and eval_s >= 0 (the same on all its rows), accuracy in
//   [0, 1] and loss >= 0, or `nan` for both from a diverged epoch on.
//
// The mapping: a leaf's normalized coordinate is (v - LO) / (HI - LO), of ln v on a log leaf; a
// trial's configuration is the one nearest to it in Euclidean distance over all leaves, the lower
// number on a tie. One replayed step is one recorded epoch: the state after step s has epoch s's
// metrics, a step takes the configuration's step_s * steps_per_epoch, an evaluation its eval_s.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "master/simulated_metrics.h"

namespace hippo::master {

class CurveTable {
 public:
  struct Leaf {
    std::string name;
    bool log = false;
    double lo = 0, hi = 1;
    double normalized(double v) const;  // NaN for v <= 0 on a log leaf
  };
  struct Config {
    std::vector<double> values;  // in the order of leaves()
    int64_t steps_per_epoch = 1;
    double step_s = 0, eval_s = 0;
    std::vector<double> accuracy, loss;  // epoch e at index e - 1
  };

  // Reads the table at `path`. Throws std::runtime_error naming the file, the line and what is
  // wrong for anything that is not a table of this form.
  static CurveTable read(const std::string& path);

  const std::vector<Leaf>& leaves() const { return leaves_; }
  const std::vector<Config>& configs() const { return configs_; }
  int64_t epochs() const { return static_cast<int64_t>(configs_.front().accuracy.size()); }
  // The number of the configuration nearest to `values` (one per leaf, in leaves()' order).
  size_t nearest(const std::vector<double>& values) const;

 private:
  std::vector<Leaf> leaves_;
  std::vector<Config> configs_;
  std::vector<std::vector<double>> normalized_;  // each configuration's coordinates
};

class RecordedCurves : public MetricModel {
 public:
  explicit RecordedCurves(const std::string& path) : table_(CurveTable::read(path)) {}
  // {"accuracy", "loss"} of the nearest configuration at epoch `step`; std::runtime_error for a
  // step outside 1..epochs or a study without a hyper-parameter named after each leaf.
  nlohmann::json metrics(const StudySpec& spec, const std::string& root_key,
                         const Hyperparams& hyperparams, int64_t step) override;
  std::optional<StepTimes> times(const StudySpec& spec, const std::string& root_key,
                                 const Hyperparams& hyperparams) override;
  const CurveTable& table() const { return table_; }

 private:
  const CurveTable::Config& config_of(const StudySpec& spec, const Hyperparams& hyperparams) const;
  CurveTable table_;
};

}  // namespace hippo::master
