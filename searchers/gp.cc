#include "searchers/gp.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "searchers/pool_searcher.h"
#include "searchers/sampler.h"

namespace hippo {
namespace {

using nlohmann::json;
using Point = std::vector<double>;  // a point of [0, 1]^d

constexpr int64_t kMostTrials = 300;
const double kSqrt5 = std::sqrt(5.0);

// Hyperparameters in log space: [log length scale per dimension..., log signal variance, log
// noise variance], each kept within bounds that suit inputs in [0, 1] and standardized outputs.
using Theta = std::vector<double>;
const double kLogLengthLo = std::log(0.01), kLogLengthHi = std::log(20.0);
const double kLogSignalLo = std::log(0.05), kLogSignalHi = std::log(20.0);
const double kLogNoiseLo = std::log(1e-6), kLogNoiseHi = std::log(1.0);

// Lower-triangular L with L L^T = a (row-major, n x n); false when a is not positive definite.
bool cholesky(std::vector<double>& a, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (size_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
    for (size_t k = j + 1; k < n; ++k) a[j * n + k] = 0;
  }
  return true;
}

// Solves L x = b in place (forward), or L^T x = b (backward).
void solve_lower(const std::vector<double>& l, size_t n, std::vector<double>& b) {
  for (size_t i = 0; i < n; ++i) {
    double s = b[i];
    for (size_t k = 0; k < i; ++k) s -= l[i * n + k] * b[k];
    b[i] = s / l[i * n + i];
  }
}
void solve_upper(const std::vector<double>& l, size_t n, std::vector<double>& b) {
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= l[k * n + i] * b[k];
    b[i] = s / l[i * n + i];
  }
}

// A GP posterior: Matérn-5/2 over the points with hyperparameters theta, targets y.
class Gp {
 public:
  Gp(std::vector<Point> x, std::vector<double> y, Theta theta)
      : x_(std::move(x)), y_(std::move(y)), theta_(std::move(theta)) {
    size_t n = x_.size();
    l_ = covariance();
    ok_ = cholesky(l_, n);
    if (!ok_) return;
    alpha_ = y_;
    solve_lower(l_, n, alpha_);
    solve_upper(l_, n, alpha_);
  }

  bool ok() const { return ok_; }

  // The log marginal likelihood, and its gradient in theta when `grad` is given.
  double log_likelihood(Theta* grad) const {
    size_t n = x_.size(), d = dims();
    double value = -0.5 * n * std::log(2 * std::numbers::pi);
    for (size_t i = 0; i < n; ++i) value -= 0.5 * y_[i] * alpha_[i] + std::log(l_[i * n + i]);
    if (!grad) return value;
    // d/dtheta = 1/2 tr((alpha alpha^T - K^-1) dK/dtheta); K^-1 from the columns of L^-1.
    std::vector<double> inverse(n * n);
    for (size_t j = 0; j < n; ++j) {
      std::vector<double> e(n, 0.0);
      e[j] = 1;
      solve_lower(l_, n, e);
      solve_upper(l_, n, e);
      for (size_t i = 0; i < n; ++i) inverse[i * n + j] = e[i];
    }
    grad->assign(d + 2, 0.0);
    double signal = std::exp(theta_[d]), noise = std::exp(theta_[d + 1]);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        double w = 0.5 * (alpha_[i] * alpha_[j] - inverse[i * n + j]);
        double r = distance(x_[i], x_[j]), e = std::exp(-kSqrt5 * r);
        // dk/dlog(length_q) = signal * 5/3 (1 + sqrt5 r) e^(-sqrt5 r) (dx_q / length_q)^2
        double common = signal * 5.0 / 3.0 * (1 + kSqrt5 * r) * e;
        for (size_t q = 0; q < d; ++q) {
          double z = (x_[i][q] - x_[j][q]) / std::exp(theta_[q]);
          (*grad)[q] += w * common * z * z;
        }
        (*grad)[d] += w * signal * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * e;
        if (i == j) (*grad)[d + 1] += w * noise;
      }
    }
    return value;
  }

  // The posterior mean and standard deviation of the latent function at p.
  std::pair<double, double> predict(const Point& p) const {
    size_t n = x_.size();
    std::vector<double> k(n);
    for (size_t i = 0; i < n; ++i) k[i] = kernel(p, x_[i]);
    double mean = 0;
    for (size_t i = 0; i < n; ++i) mean += k[i] * alpha_[i];
    solve_lower(l_, n, k);
    double variance = std::exp(theta_[dims()]);
    for (double v : k) variance -= v * v;
    return {mean, std::sqrt(std::max(variance, 1e-12))};
  }

 private:
  size_t dims() const { return theta_.size() - 2; }
  double distance(const Point& a, const Point& b) const {
    double s = 0;
    for (size_t q = 0; q < dims(); ++q) {
      double z = (a[q] - b[q]) / std::exp(theta_[q]);
      s += z * z;
    }
    return std::sqrt(s);
  }
  double kernel(const Point& a, const Point& b) const {
    double r = distance(a, b);
    return std::exp(theta_[dims()]) * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
  }
  std::vector<double> covariance() const {
    size_t n = x_.size();
    std::vector<double> k(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) k[i * n + j] = k[j * n + i] = kernel(x_[i], x_[j]);
    for (size_t i = 0; i < n; ++i) k[i * n + i] += std::exp(theta_[dims() + 1]);
    return k;
  }

  std::vector<Point> x_;
  std::vector<double> y_;
  Theta theta_;
  std::vector<double> l_, alpha_;
  bool ok_ = false;
};

Theta clamp_theta(Theta t) {
  size_t d = t.size() - 2;
  for (size_t q = 0; q < d; ++q) t[q] = std::clamp(t[q], kLogLengthLo, kLogLengthHi);
  t[d] = std::clamp(t[d], kLogSignalLo, kLogSignalHi);
  t[d + 1] = std::clamp(t[d + 1], kLogNoiseLo, kLogNoiseHi);
  return t;
}

// The hyperparameters of largest marginal likelihood found by projected gradient ascent (a step
// along the normalized gradient that grows while it helps and halves when it does not) from three
// fixed starts: short, medium and long length scales.
Theta fit(const std::vector<Point>& x, const std::vector<double>& y, size_t d) {
  Theta best;
  double best_value = -INFINITY;
  for (double length : {0.1, 0.3, 1.0}) {
    Theta theta(d, std::log(length));
    theta.push_back(0.0);             // signal variance 1: the outputs are standardized
    theta.push_back(std::log(1e-3));  // little noise
    Theta grad;
    Gp gp(x, y, theta);
    if (!gp.ok()) continue;
    double value = gp.log_likelihood(&grad);
    double step = 0.5;
    for (int iteration = 0; iteration < 40 && step > 1e-3; ++iteration) {
      double norm = 0;
      for (double g : grad) norm += g * g;
      norm = std::sqrt(norm);
      if (norm < 1e-9) break;
      Theta next = theta;
      for (size_t i = 0; i < next.size(); ++i) next[i] += step * grad[i] / norm;
      next = clamp_theta(next);
      Gp candidate(x, y, next);
      Theta next_grad;
      double next_value = candidate.ok() ? candidate.log_likelihood(&next_grad) : -INFINITY;
      if (next_value > value) {
        theta = next, value = next_value, grad = next_grad;
        step *= 1.2;
      } else {
        step *= 0.5;
      }
    }
    if (value > best_value) best = theta, best_value = value;
  }
  return best;
}

// The expected improvement below `best` of a posterior (mean, sd).
double expected_improvement(std::pair<double, double> posterior, double best) {
  auto [mean, sd] = posterior;
  double z = (best - mean) / sd;
  double cdf = 0.5 * std::erfc(-z / std::numbers::sqrt2);
  double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
  return (best - mean) * cdf + sd * pdf;
}

class GpSampler : public Sampler {
 public:
  // `spec` must outlive the sampler (it is its searcher's).
  GpSampler(const StudySpec& spec, const Field& options, uint64_t trials) : spec_(spec) {
    for (const Param& p : spec_.space.params()) {
      if (p.kind == DistKind::kGrid || p.kind == DistKind::kChoice)
        throw SpecError(spec_.space.written_at(p) +
                        ": gp searches uniform, loguniform and int leaves only; " + p.name +
                        " is a " + (p.kind == DistKind::kGrid ? "grid" : "choice") +
                        " (tpe handles those)");
    }
    if (trials > kMostTrials)
      Field(spec.searcher.options, "searcher.max_trials")
          .fail("gp runs at most " + std::to_string(kMostTrials) +
                " trials (each proposal costs O(n^3) in the trials so far), got " +
                std::to_string(trials));
    n_startup_ = std::max<uint64_t>(5, spec_.space.params().size() + 1);
    if (options.has("n_startup")) n_startup_ = options["n_startup"].integer(0, 1'000'000);
    if (options.has("candidates")) candidates_ = options["candidates"].integer(1, 1'000'000);
  }

 private:
 public:
  Params propose(uint64_t index, const SamplerView& view) override {
    // Best first, the earlier trial first among equals.
    std::vector<SampledTrial> scored = view.observed;
    std::stable_sort(scored.begin(), scored.end(),
                     [&](const SampledTrial& a, const SampledTrial& b) {
                       return better(a.value, b.value, spec_.searcher.maximize);
                     });
    size_t d = spec_.space.params().size();
    if (index + prior_observed(view) < n_startup_ || scored.size() < 2 || d == 0)
      return spec_.space.draw(spec_.seed, index, std::nullopt);
    // Standardized values, to be minimized.
    std::vector<Point> x;
    std::vector<double> y;
    for (const SampledTrial& t : scored) {
      x.push_back(spec_.space.unit_coordinates(*t.params));
      double v = t.value;
      y.push_back(spec_.searcher.maximize ? -v : v);
    }
    double mean = 0, var = 0;
    for (double v : y) mean += v / double(y.size());
    for (double v : y) var += (v - mean) * (v - mean) / double(y.size());
    double sd = var > 0 ? std::sqrt(var) : 1.0;
    for (double& v : y) v = (v - mean) / sd;
    double best = *std::min_element(y.begin(), y.end());

    Theta theta = fit(x, y, d);
    if (theta.empty()) return spec_.space.draw(spec_.seed, index, std::nullopt);
    // Kriging believer: running trials observed at the model's mean.
    Gp observed(x, y, theta);
    for (const SampledTrial& t : view.running) {
      Point p = spec_.space.unit_coordinates(*t.params);
      y.push_back(observed.predict(p).first);
      x.push_back(std::move(p));
    }
    Gp gp(std::move(x), std::move(y), theta);
    if (!gp.ok()) return spec_.space.draw(spec_.seed, index, std::nullopt);
    auto ei = [&](const Point& p) { return expected_improvement(gp.predict(p), best); };

    // Seeded uniform candidates; the best few refined by a pattern search.
    CounterRandom random(spec_.seed, index);
    std::vector<std::pair<double, Point>> scored_candidates;
    for (int64_t c = 0; c < candidates_; ++c) {
      Point p(d);
      for (double& v : p) v = random.next();
      scored_candidates.emplace_back(ei(p), std::move(p));
    }
    size_t refined = std::min<size_t>(5, scored_candidates.size());
    std::partial_sort(scored_candidates.begin(), scored_candidates.begin() + refined,
                      scored_candidates.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    Point winner = scored_candidates[0].second;
    double winner_ei = scored_candidates[0].first;
    for (size_t c = 0; c < refined; ++c) {
      auto [value, p] = scored_candidates[c];
      double step = 0.05;
      for (int move = 0; move < 100 && step > 1e-4; ++move) {
        bool moved = false;
        for (size_t q = 0; q < d; ++q) {
          for (double sign : {1.0, -1.0}) {
            Point next = p;
            next[q] = std::clamp(p[q] + sign * step, 0.0, 1.0);
            double next_value = ei(next);
            if (next_value > value) p = std::move(next), value = next_value, moved = true;
          }
        }
        if (!moved) step /= 2;
      }
      if (value > winner_ei) winner = p, winner_ei = value;
    }
    return spec_.space.from_unit_coordinates(winner);
  }

 private:
  const StudySpec& spec_;
  uint64_t n_startup_;
  int64_t candidates_ = 2000;
};

}  // namespace

std::unique_ptr<Sampler> make_gp_sampler(const StudySpec& spec, const Field& options,
                                         uint64_t trials) {
  return std::make_unique<GpSampler>(spec, options, trials);
}

SearcherKind gp_searcher_kind() {
  std::vector<std::string> options = {"parallel"};
  for (const std::string& o : sampler_options().at("gp")) options.push_back(o);
  return {options, [](const StudySpec& s) { return make_sampler_searcher(s, "gp"); }, false, true};
}

}  // namespace hippo
