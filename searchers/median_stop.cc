#include "searchers/median_stop.h"

#include <algorithm>
#include <stdexcept>

#include "searchers/basic.h"
#include "searchers/pool_searcher.h"

namespace hippo {
namespace {

bool has_grid(const SearchSpace& space) {
  return std::any_of(space.params().begin(), space.params().end(),
                     [](const Param& p) { return p.kind == DistKind::kGrid; });
}

// All grid points (or max_trials of them) when the space has grid leaves, else max_trials draws.
uint64_t median_stop_trials(const StudySpec& spec) {
  Field max_trials(spec.searcher.options, "searcher.max_trials");  // for its path only
  if (!has_grid(spec.space)) {
    if (!spec.searcher.max_trials) max_trials.fail("missing (the space has no grid)");
    return *spec.searcher.max_trials;
  }
  uint64_t points = spec.space.grid_size();
  if (!spec.searcher.max_trials && points > kMaxGridTrials)
    max_trials.fail("the grid has more than " + std::to_string(kMaxGridTrials) +
                    " points; give max_trials");
  return std::min<uint64_t>(points, spec.searcher.max_trials.value_or(points));
}

class MedianStopSearcher : public PoolSearcher {
 public:
  explicit MedianStopSearcher(const StudySpec& spec)
      : PoolSearcher(spec, median_stop_trials(spec)), grid_(has_grid(spec.space)) {
    Field options(spec.searcher.options, "searcher");
    if (options.has("grace")) grace_ = parse_span(options["grace"]);
    if (grace_ && grace_->epochs && !spec.no_epochs.empty())
      options["grace"]["epochs"].fail("epoch units are not possible here: " + spec.no_epochs);
    if (options.has("min_trials")) min_trials_ = options["min_trials"].integer(1, 1'000'000);
  }

 private:
  Params propose(uint64_t index) override {
    return spec_.space.draw(spec_.seed, index,
                            grid_ ? std::optional<uint64_t>(index) : std::nullopt);
  }

  bool should_stop(RequestId trial, int64_t step) override {
    const Params& params = trials_[trial].params;
    int64_t grace =
        grace_ ? grace_->steps(spec_.steps_per_epoch(params)) : spec_.eval_steps(params).front();
    if (step <= grace || step >= spec_.length_steps(params)) return false;
    std::vector<double> others;
    for (size_t i = 0; i < trials_.size(); ++i) {
      auto it = trials_[i].values.find(step);
      if (static_cast<RequestId>(i) != trial && it != trials_[i].values.end())
        others.push_back(it->second);
    }
    if (static_cast<int64_t>(others.size()) < min_trials_) return false;
    std::sort(others.begin(), others.end());
    size_t n = others.size();
    double median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
    return better(median, trials_[trial].values.at(step));
  }

  bool grid_;
  std::optional<Span> grace_;  // none: the first evaluation step
  int64_t min_trials_ = 3;
};

}  // namespace

SearcherKind median_stop_searcher_kind() {
  return {{"parallel", "grace", "min_trials"},
          [](const StudySpec& s) { return std::make_unique<MedianStopSearcher>(s); }};
}

}  // namespace hippo
