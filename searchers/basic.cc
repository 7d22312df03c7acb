#include "searchers/basic.h"

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include "searchers/sobol.h"

namespace hippo {
namespace {

// Where trial i's values come from.
enum class Points {
  kGrid,        // grid point i
  kRandomGrid,  // grid point permuted(i): every point once, in a seeded random order
  kRandom,      // seeded draws
  kSobol,       // point i of the seeded scrambled Sobol sequence
};

class UpFrontSearcher : public Searcher {
 public:
  UpFrontSearcher(const StudySpec& spec, Points points) : spec_(spec), points_(points) {
    Field max_trials(spec.searcher.options, "searcher.max_trials");  // for its path only
    const bool grid = points == Points::kGrid;
    if (grid) {
      Field options(spec.searcher.options, "searcher");
      if (options.has("order")) {
        const std::string& order = options["order"].text();
        if (order == "random")
          points_ = Points::kRandomGrid;
        else if (order != "grid")
          options["order"].fail("expected \"grid\" or \"random\", got " +
                                brief(options["order"].json()));
      }
      uint64_t points = spec.space.grid_size();
      if (!spec.searcher.max_trials && points > kMaxGridTrials)
        max_trials.fail(
            "the grid has " +
            (points == UINT64_MAX ? std::string("more than 2^64") : std::to_string(points)) +
            " points; give max_trials (at most " + std::to_string(kMaxGridTrials) + ")");
      if (points_ == Points::kRandomGrid && points > (uint64_t{1} << 62))
        Field(spec.searcher.options, "searcher.order")
            .fail("a random order needs a grid of at most 2^62 points");
      grid_points_ = points;
      trials_ = std::min<uint64_t>(points, spec.searcher.max_trials.value_or(points));
    } else {
      if (!spec.searcher.max_trials)
        max_trials.fail("missing (" + spec.searcher.name + " search needs it)");
      trials_ = *spec.searcher.max_trials;
    }
    if (points_ == Points::kSobol) {
      check_sobol_leaves(spec.space.params().size(), Field(spec.searcher.options, "searcher.name"));
      if (trials_ > (uint64_t{1} << 32)) max_trials.fail("sobol gives at most 2^32 points");
    }
  }

  std::vector<Operation> on_study_start() override { return next_batch(); }

  // The next kTrialBatch trials: a large grid enters the plan a batch at a time, between the
  // master's other work.
  std::vector<Operation> next_batch() override {
    std::vector<Operation> ops;
    for (uint64_t end = std::min(trials_, created_ + kTrialBatch); created_ < end; ++created_) {
      Params params = params_of(created_);
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
  // The enqueued configurations first, then the searcher's own points from the first.
  Params params_of(uint64_t trial) const {
    const uint64_t k = spec_.enqueued.size();
    if (trial < k) return spec_.enqueued[trial];
    const uint64_t i = trial - k;
    switch (points_) {
      case Points::kGrid:
        return spec_.space.draw(spec_.seed, i, i);
      case Points::kRandomGrid:
        return spec_.space.draw(spec_.seed, i, permuted(i, grid_points_, spec_.seed));
      case Points::kRandom:
        break;
      case Points::kSobol:
        return spec_.space.at(sobol_point(i, spec_.space.params().size(), spec_.seed),
                              std::nullopt);
    }
    return spec_.space.draw(spec_.seed, i, std::nullopt);
  }

  std::vector<Operation> close(RequestId trial) {
    if (trial < 0 || static_cast<uint64_t>(trial) >= trials_)
      throw std::invalid_argument(spec_.searcher.name + " searcher: no trial " +
                                  std::to_string(trial));
    closed_.insert(trial);
    if (closed_.size() == trials_) return {Finish{}};
    return {};
  }

  StudySpec spec_;
  Points points_;
  uint64_t grid_points_ = 0;
  uint64_t trials_ = 0;
  uint64_t created_ = 0;  // trials 0 .. created_ - 1 were given out
  std::set<RequestId> closed_;
};

}  // namespace

// Values never change what these searchers do: any number of objectives goes.
SearcherKind grid_searcher_kind() {
  return {{"order"},
          [](const StudySpec& s) { return std::make_unique<UpFrontSearcher>(s, Points::kGrid); },
          true};
}

SearcherKind random_searcher_kind() {
  return {{},
          [](const StudySpec& s) { return std::make_unique<UpFrontSearcher>(s, Points::kRandom); },
          true,
          true};
}

SearcherKind sobol_searcher_kind() {
  return {{},
          [](const StudySpec& s) { return std::make_unique<UpFrontSearcher>(s, Points::kSobol); },
          true,
          true};
}

}  // namespace hippo
