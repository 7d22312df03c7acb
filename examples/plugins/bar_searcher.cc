// A complete C++ searcher plug-in: random search that stops every trial whose metric falls on
// the wrong side of a bar at any evaluation. Compiled into `hippo` through the CMake option
// HIPPO_SEARCHER_PLUGINS (this file is in its default), and used from a spec as
//   "searcher": {"name": "bar", "metric": "accuracy", "mode": "max", "max_trials": 8, "bar": 0.7}
#include <set>

#include "searchers/searcher.h"

namespace {

using hippo::Field;
using hippo::Operation;
using hippo::RequestId;

class BarSearcher : public hippo::Searcher {
 public:
  explicit BarSearcher(const hippo::StudySpec& spec) : spec_(spec) {
    Field options(spec.searcher.options, "searcher");
    bar_ = options["bar"].number();  // SpecError "searcher.bar: ..." when missing or not a number
    if (!spec.searcher.max_trials) throw hippo::SpecError("searcher.max_trials: missing");
    trials_ = *spec.searcher.max_trials;
  }

  std::vector<Operation> on_study_start() override {
    std::vector<Operation> ops;
    for (int64_t id = 0; id < trials_; ++id) {
      hippo::Params params =
          spec_.space.draw(spec_.seed, id, std::nullopt);  // seeded: reproducible
      ops.push_back(hippo::Create{id, params, std::nullopt});
      ops.push_back(hippo::Train{id, spec_.length_steps(params), spec_.eval_steps(params)});
    }
    return ops;
  }

  std::vector<Operation> on_validation(RequestId trial, int64_t, double value) override {
    bool below = spec_.searcher.maximize ? value < bar_ : value > bar_;
    if (!below || ended_.count(trial)) return {};
    std::vector<Operation> ops = {hippo::Stop{trial}};  // a stopped trial is not closed later
    for (Operation& op : end(trial)) ops.push_back(op);
    return ops;
  }
  std::vector<Operation> on_trial_closed(RequestId trial) override { return end(trial); }
  std::vector<Operation> on_trial_failed(RequestId trial) override { return end(trial); }

  // Everything it decides from is the spec and the set of ended trials.
  nlohmann::json save() const override { return {{"ended", ended_}}; }
  void load(const nlohmann::json& state) override {
    Field ended = Field(state, "state")["ended"];  // every problem is a SpecError with its path
    std::set<RequestId> ids;
    for (size_t i = 0, n = ended.items(0); i < n; ++i) ids.insert(ended[i].integer(0, trials_ - 1));
    ended_ = std::move(ids);
  }

 private:
  std::vector<Operation> end(RequestId trial) {
    ended_.insert(trial);
    if (static_cast<int64_t>(ended_.size()) == trials_) return {hippo::Finish{}};
    return {};
  }

  hippo::StudySpec spec_;
  double bar_ = 0;
  int64_t trials_ = 0;
  std::set<RequestId> ended_;
};

hippo::SearcherRegistrar registrar("bar", {{"bar"}, [](const hippo::StudySpec& spec) {
                                             return std::make_unique<BarSearcher>(spec);
                                           }});

}  // namespace
