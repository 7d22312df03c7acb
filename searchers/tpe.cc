#include "searchers/tpe.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "searchers/pool_searcher.h"

namespace hippo {
namespace {

using nlohmann::json;

// The standard normal's cumulative distribution.
double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

// A mixture of equally weighted Gaussian kernels truncated to [lo, hi]: a prior kernel over the
// whole range (so that an empty or one-sided model still explores) and one kernel per point.
class Parzen {
 public:
  Parzen(double lo, double hi, const std::vector<double>& points) : lo_(lo), hi_(hi) {
    double range = hi - lo;
    mu_.push_back((lo + hi) / 2);
    sigma_.push_back(range);
    // Bandwidths as in Optuna's univariate TPE (after hyperopt): each kernel as wide as the larger
    // gap to its neighbors (the other points, the prior's center, the range's ends), within
    // [range / min(100, n), range]: narrow where points crowd, wide where they are sparse.
    std::vector<double> sorted = points;
    sorted.push_back(mu_[0]);
    std::sort(sorted.begin(), sorted.end());
    double narrowest = range / std::min(100.0, double(sorted.size()));
    for (double x : points) {
      auto it = std::lower_bound(sorted.begin(), sorted.end(), x);
      double left = x - (it == sorted.begin() ? lo : *(it - 1));
      double right = (it + 1 == sorted.end() ? hi : *(it + 1)) - x;
      mu_.push_back(x);
      sigma_.push_back(std::clamp(std::max(left, right), narrowest, range));
    }
  }

  // The density up to the factor 1/sqrt(2 pi), which cancels in l(x)/g(x).
  double density(double x) const {
    double sum = 0;
    for (size_t i = 0; i < mu_.size(); ++i) {
      double z = (x - mu_[i]) / sigma_[i];
      double mass = normal_cdf((hi_ - mu_[i]) / sigma_[i]) - normal_cdf((lo_ - mu_[i]) / sigma_[i]);
      sum += std::exp(-0.5 * z * z) / (sigma_[i] * mass);
    }
    return sum / double(mu_.size());
  }

  // A kernel at random, then a draw from it inside [lo, hi] (by rejection; the kernels hold at
  // least a third of their mass in the range, so the fallback to the kernel's center is rare).
  double sample(CounterRandom& random) const {
    size_t i = std::min(mu_.size() - 1, size_t(random.next() * double(mu_.size())));
    for (int attempt = 0; attempt < 64; ++attempt) {
      double u1 = random.next(), u2 = random.next();  // Box-Muller
      double z = std::sqrt(-2 * std::log1p(-u1)) * std::cos(2 * std::numbers::pi * u2);
      double x = mu_[i] + sigma_[i] * z;
      if (x >= lo_ && x <= hi_) return x;
    }
    return std::clamp(mu_[i], lo_, hi_);
  }

 private:
  double lo_, hi_;
  std::vector<double> mu_, sigma_;
};

// The frequencies of a categorical leaf's values among the trials, each count plus one.
std::vector<double> frequencies(const Param& p, const std::vector<const Params*>& trials) {
  std::vector<double> weights(p.values.size(), 1.0);
  for (const Params* t : trials) {
    auto it = std::find(p.values.begin(), p.values.end(), t->at(p.name));
    if (it != p.values.end()) weights[it - p.values.begin()] += 1;
  }
  double total = double(trials.size() + p.values.size());
  for (double& w : weights) w /= total;
  return weights;
}

size_t pick(const std::vector<double>& weights, double u) {
  for (size_t i = 0; i + 1 < weights.size(); ++i) {
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return weights.size() - 1;
}

class TpeSearcher : public PoolSearcher {
 public:
  explicit TpeSearcher(const StudySpec& spec) : PoolSearcher(spec, max_trials(spec)) {
    Field options(spec.searcher.options, "searcher");
    if (options.has("n_startup")) n_startup_ = options["n_startup"].integer(0, 1'000'000);
    if (options.has("candidates")) candidates_ = options["candidates"].integer(1, 1'000'000);
    if (options.has("gamma")) {
      gamma_ = options["gamma"].number();
      if (gamma_ <= 0 || gamma_ >= 1)
        options["gamma"].fail("expected a number in (0, 1), got " + brief(options["gamma"].json()));
    }
  }

 private:
  static uint64_t max_trials(const StudySpec& spec) {
    if (!spec.searcher.max_trials)
      Field(spec.searcher.options, "searcher.max_trials").fail("missing (tpe needs it)");
    return *spec.searcher.max_trials;
  }

  Params propose(uint64_t index) override {
    if (index < n_startup_) return spec_.space.draw(spec_.seed, index, std::nullopt);
    // Closed trials, best first (the earlier trial first among equals).
    std::vector<const PoolTrial*> scored;
    for (const PoolTrial& t : trials_)
      if (t.status == Status::kClosed && !t.values.empty()) scored.push_back(&t);
    std::stable_sort(scored.begin(), scored.end(), [&](const PoolTrial* a, const PoolTrial* b) {
      return better(a->values.rbegin()->second, b->values.rbegin()->second);
    });
    size_t n_good = std::min(
        scored.size(), std::max<size_t>(1, size_t(std::ceil(gamma_ * double(scored.size())))));
    std::vector<const Params*> good, bad;
    for (size_t i = 0; i < scored.size(); ++i)
      (i < n_good ? good : bad).push_back(&scored[i]->params);
    CounterRandom random(spec_.seed, index);
    Params out = Params::object();
    for (const Param& p : spec_.space.params())
      out[p.name] = p.kind == DistKind::kGrid || p.kind == DistKind::kChoice
                        ? categorical(p, good, bad, random)
                        : numeric(p, good, bad, random);
    return out;
  }

  json categorical(const Param& p, const std::vector<const Params*>& good,
                   const std::vector<const Params*>& bad, CounterRandom& random) const {
    std::vector<double> l = frequencies(p, good), g = frequencies(p, bad);
    size_t best = 0;
    double best_score = -1;
    for (int64_t c = 0; c < candidates_; ++c) {
      size_t i = pick(l, random.next());
      if (l[i] / g[i] > best_score) best = i, best_score = l[i] / g[i];
    }
    return p.values[best];
  }

  json numeric(const Param& p, const std::vector<const Params*>& good,
               const std::vector<const Params*>& bad, CounterRandom& random) const {
    bool log = p.kind == DistKind::kLogUniform, integer = p.kind == DistKind::kInt;
    auto coordinates = [&](const std::vector<const Params*>& trials) {
      std::vector<double> out;
      for (const Params* t : trials) {
        double x = t->at(p.name).get<double>();
        out.push_back(log ? std::log(x) : x);
      }
      return out;
    };
    double lo = log ? std::log(p.lo) : integer ? p.lo - 0.5 : p.lo;
    double hi = log ? std::log(p.hi) : integer ? p.hi + 0.5 : p.hi;
    Parzen l(lo, hi, coordinates(good)), g(lo, hi, coordinates(bad));
    double best = 0, best_score = -1;
    for (int64_t c = 0; c < candidates_; ++c) {
      double x = l.sample(random);
      if (integer) x = std::clamp(std::round(x), p.lo, p.hi);
      double score = l.density(x) / g.density(x);
      if (score > best_score) best = x, best_score = score;
    }
    if (integer) return int64_t(best);
    return std::clamp(log ? std::exp(best) : best, p.lo, p.hi);
  }

  bool should_stop(RequestId, int64_t) override { return false; }

  uint64_t n_startup_ = 5;
  double gamma_ = 0.25;
  int64_t candidates_ = 24;
};

}  // namespace

SearcherKind tpe_searcher_kind() {
  return {{"parallel", "n_startup", "gamma", "candidates"},
          [](const StudySpec& s) { return std::make_unique<TpeSearcher>(s); }};
}

}  // namespace hippo
