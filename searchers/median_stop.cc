#include "searchers/median_stop.h"

#include <algorithm>
#include <cmath>
#include <optional>
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

  // Optuna's MedianPruner (and Vizier's median rule): once `min_trials` trials have completed
  // (trained to their length, neither stopped nor failed), a trial whose best value so far is
  // worse than the median of the completed trials' values at this same step is stopped. Running
  // and stopped trials never count: they are not the population a finished study compares with.
  bool should_stop(RequestId trial, int64_t step) override {
    const PoolTrial& t = trials_[trial];
    int64_t grace = grace_ ? grace_->steps(spec_.steps_per_epoch(t.params))
                           : spec_.eval_steps(t.params).front();
    if (step <= grace || step >= spec_.length_steps(t.params)) return false;
    std::vector<double> completed;
    int64_t n_completed = 0;
    for (const PoolTrial& other : trials_) {
      if (other.status != Status::kClosed) continue;
      ++n_completed;
      auto it = other.values.find(step);
      if (it != other.values.end() && !std::isnan(it->second)) completed.push_back(it->second);
    }
    if (n_completed < min_trials_ || completed.empty()) return false;
    std::optional<double> best;  // so far, NaN ignored as numpy's nanmax and nanmin do
    for (const auto& entry : t.values)
      if (double value = entry.second; !std::isnan(value) && (!best || better(value, *best)))
        best = value;
    if (!best) return true;  // nothing but NaN: Optuna prunes it
    std::sort(completed.begin(), completed.end());
    size_t n = completed.size();
    double median = n % 2 ? completed[n / 2] : (completed[n / 2 - 1] + completed[n / 2]) / 2;
    return better(median, *best);
  }

  bool grid_;
  std::optional<Span> grace_;  // none: the first evaluation step
  int64_t min_trials_ = 5;     // Optuna's n_startup_trials
};

}  // namespace

SearcherKind median_stop_searcher_kind() {
  return {{"parallel", "grace", "min_trials"},
          [](const StudySpec& s) { return std::make_unique<MedianStopSearcher>(s); }};
}

}  // namespace hippo
