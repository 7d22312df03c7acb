#include "searchers/basic.h"

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

namespace hippo {
namespace {

class UpFrontSearcher : public Searcher {
 public:
  UpFrontSearcher(const StudySpec& spec, bool grid) : spec_(spec), grid_(grid) {
    Field max_trials(spec.searcher.options, "searcher.max_trials");  // for its path only
    if (grid) {
      uint64_t points = spec.space.grid_size();
      if (!spec.searcher.max_trials && points > kMaxGridTrials)
        max_trials.fail(
            "the grid has " +
            (points == UINT64_MAX ? std::string("more than 2^64") : std::to_string(points)) +
            " points; give max_trials (at most " + std::to_string(kMaxGridTrials) + ")");
      trials_ = std::min<uint64_t>(points, spec.searcher.max_trials.value_or(points));
    } else {
      if (!spec.searcher.max_trials) max_trials.fail("missing (random search needs it)");
      trials_ = *spec.searcher.max_trials;
    }
  }

  std::vector<Operation> on_study_start() override { return next_batch(); }

  // The next kTrialBatch trials: a large grid enters the plan a batch at a time, between the
  // master's other work.
  std::vector<Operation> next_batch() override {
    std::vector<Operation> ops;
    for (uint64_t end = std::min(trials_, created_ + kTrialBatch); created_ < end; ++created_) {
      Params params = spec_.space.draw(spec_.seed, created_,
                                       grid_ ? std::optional<uint64_t>(created_) : std::nullopt);
      RequestId id = static_cast<RequestId>(created_);
      ops.emplace_back(Create{id, params, std::nullopt});
      ops.emplace_back(Train{id, spec_.length_steps(params), spec_.eval_steps(params)});
    }
    return ops;
  }

  std::optional<uint64_t> most_trials() const override { return trials_; }

  std::vector<Operation> on_validation(RequestId, int64_t, double) override { return {}; }
  std::vector<Operation> on_trial_closed(RequestId trial) override { return close(trial); }
  std::vector<Operation> on_trial_failed(RequestId trial) override { return close(trial); }

  nlohmann::json save() const override { return {{"created", created_}, {"closed", closed_}}; }

  void load(const nlohmann::json& state) override {
    Field f(state, "state");
    f.check_keys({"created", "closed"});
    // A state saved before trials came in batches has every trial created.
    const int64_t all = static_cast<int64_t>(trials_);
    uint64_t created = f.has("created") ? f["created"].integer(0, all) : trials_;
    Field closed = f["closed"];
    std::set<RequestId> ids;
    for (size_t i = 0, n = closed.items(0); i < n; ++i)
      ids.insert(closed[i].integer(0, static_cast<int64_t>(created) - 1));
    created_ = created;
    closed_ = std::move(ids);
  }

 private:
  std::vector<Operation> close(RequestId trial) {
    if (trial < 0 || static_cast<uint64_t>(trial) >= trials_)
      throw std::invalid_argument(spec_.searcher.name + " searcher: no trial " +
                                  std::to_string(trial));
    closed_.insert(trial);
    if (closed_.size() == trials_) return {Finish{}};
    return {};
  }

  StudySpec spec_;
  bool grid_;
  uint64_t trials_ = 0;
  uint64_t created_ = 0;  // trials 0 .. created_ - 1 were given out
  std::set<RequestId> closed_;
};

}  // namespace

SearcherKind grid_searcher_kind() {
  // Values never change what grid and random do: any number of objectives goes.
  return {{}, [](const StudySpec& s) { return std::make_unique<UpFrontSearcher>(s, true); }, true};
}

SearcherKind random_searcher_kind() {
  return {{}, [](const StudySpec& s) { return std::make_unique<UpFrontSearcher>(s, false); }, true};
}

}  // namespace hippo
