#include "searchers/median_stop.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>

#include "searchers/basic.h"
#include "searchers/pool_searcher.h"
#include "searchers/sampler.h"

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
    if (options.has("percentile")) {
      percentile_ = options["percentile"].number();
      if (!(percentile_ >= 0 && percentile_ <= 100))
        options["percentile"].fail("expected a number in [0, 100], got " +
                                   brief(options["percentile"].json()));
    }
    if (options.has("interval")) {
      interval_ = parse_span(options["interval"]);
      if (interval_->epochs && !spec.no_epochs.empty())
        options["interval"]["epochs"].fail("epoch units are not possible here: " + spec.no_epochs);
    }
    if (options.has("patience")) patience_ = options["patience"].integer(0, 1'000'000);
    if (options.has("threshold")) {
      Field threshold = options["threshold"];
      threshold.check_keys({"lower", "upper"});
      if (!threshold.has("lower") && !threshold.has("upper"))
        threshold.fail("expected lower and/or upper");
      if (threshold.has("lower")) lower_ = threshold["lower"].number();
      if (threshold.has("upper")) upper_ = threshold["upper"].number();
      if (lower_ > upper_) threshold.fail("lower is above upper");
    }
    sampler_ = scheduler_sampler(spec_, *most_trials());
    if (grid_ && !spec.enqueued.empty())
      throw SpecError("enqueue: median_stop over a grid evaluates its grid points");
  }

  std::vector<Operation> enqueue(const Params& params) override {
    if (grid_) throw std::invalid_argument("median_stop over a grid evaluates its grid points");
    return PoolSearcher::enqueue(params);
  }

 private:
  Params propose(uint64_t index) override {
    if (sampler_) return sampler_->propose(index, levels());
    return spec_.space.draw(spec_.seed, index,
                            grid_ ? std::optional<uint64_t>(index) : std::nullopt);
  }

  // A sampler's view: observations by BOHB's rule over the evaluation steps (every trial's finite
  // values, running, stopped and failed ones too), and the trials in flight.
  SamplerView levels() const {
    std::map<int64_t, std::vector<SampledTrial>> by_step =
        prior_by_level(spec_, [&](const Params& params) { return spec_.eval_steps(params); });
    SamplerView v;
    for (size_t i = 0; i < trials_.size(); ++i) {
      const PoolTrial& t = trials_[i];
      const RequestId id = static_cast<RequestId>(i);
      if (t.status == Status::kRunning) v.running.push_back({id, &t.params, 0});
      for (const auto& [step, value] : t.values)
        if (std::isfinite(value)) by_step[step].push_back({id, &t.params, value});
    }
    v.observed = bohb_observations(spec_, by_step);
    return v;
  }

  // Optuna's MedianPruner (and Vizier's median rule): once `min_trials` trials have completed
  // (trained to their length, neither stopped nor failed), a trial whose best value so far is
  // worse than the median of the completed trials' values at this same step is stopped. Running
  // and stopped trials never count: they are not the population a finished study compares with.
  bool should_stop(RequestId trial, int64_t step) override {
    const PoolTrial& t = trials_[trial];
    const int64_t per_epoch = spec_.steps_per_epoch(t.params);
    int64_t grace = grace_ ? grace_->steps(per_epoch) : spec_.eval_steps(t.params).front();
    if (step <= grace || step >= spec_.length_steps(t.params)) return false;
    if (interval_ && !first_in_interval(t, step, grace, interval_->steps(per_epoch))) return false;
    const double value = t.values.at(step);
    if (value < lower_ || value > upper_) return true;
    if (patience_ && !stalled(t)) return false;
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
    return better(percentile(completed), *best);
  }

  // The `percentile` of the completed trials' values (sorted), as Optuna's PercentilePruner takes
  // it: the percentile of the values in the direction of the mode (100 - percentile when
  // maximizing), interpolated linearly as numpy's nanpercentile. The median (the default, 50) is
  // the middle value or the mean of the two middle ones.
  double percentile(const std::vector<double>& sorted) const {
    const size_t n = sorted.size();
    if (percentile_ == 50) return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    const double q = spec_.searcher.maximize ? 100 - percentile_ : percentile_;
    const double position = q / 100 * double(n - 1);
    const size_t below = std::min(n - 1, static_cast<size_t>(position));
    const double a = sorted[below], b = sorted[std::min(n - 1, below + 1)];
    const double t = position - double(below);
    return t >= 0.5 ? b - (1 - t) * (b - a) : a + t * (b - a);  // numpy's _lerp
  }

  // Optuna's interval_steps: a step is judged when it is the trial's first evaluation at or after
  // a judging step, grace + 1 + k * interval.
  static bool first_in_interval(const PoolTrial& t, int64_t step, int64_t grace, int64_t interval) {
    const int64_t first = grace + 1;
    const int64_t every = std::max<int64_t>(1, interval);
    const int64_t judging = (step - first) / every * every + first;
    auto it = t.values.find(step);
    const int64_t previous = it == t.values.begin() ? -1 : std::prev(it)->first;
    return previous < judging;
  }

  // Optuna's PatientPruner (min_delta 0): the best of the last patience + 1 evaluations is worse
  // than the best before them. Fewer evaluations than patience + 2: not stalled.
  bool stalled(const PoolTrial& t) const {
    if (t.values.size() <= static_cast<size_t>(*patience_) + 1) return false;
    std::optional<double> before, after;
    size_t i = 0;
    const size_t cut = t.values.size() - static_cast<size_t>(*patience_) - 1;
    for (const auto& entry : t.values) {
      std::optional<double>& best = i++ < cut ? before : after;
      if (!std::isnan(entry.second) && (!best || better(entry.second, *best))) best = entry.second;
    }
    return before && after && better(*before, *after);
  }

  bool grid_;
  std::optional<Span> grace_;  // none: the first evaluation step
  int64_t min_trials_ = 5;     // Optuna's n_startup_trials
  double percentile_ = 50;
  std::optional<Span> interval_;     // none: every evaluation step
  std::optional<int64_t> patience_;  // none: no patience rule
  double lower_ = -INFINITY, upper_ = INFINITY;
};

}  // namespace

SearcherKind median_stop_searcher_kind() {
  return {{"parallel", "grace", "min_trials", "percentile", "interval", "patience", "threshold",
           "sampler"},
          [](const StudySpec& s) { return std::make_unique<MedianStopSearcher>(s); },
          false,
          true};
}

}  // namespace hippo
