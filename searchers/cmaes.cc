#include "searchers/cmaes.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "searchers/pool_searcher.h"
#include "searchers/sampler.h"

namespace hippo {
namespace {

using nlohmann::json;
using Vector = std::vector<double>;
using Matrix = std::vector<Vector>;  // square, row by row

// The eigenvalues (in `values`) and unit eigenvectors (the columns of `vectors`) of a symmetric
// matrix, by cyclic Jacobi rotations: a handful of sweeps for the few leaves a study has.
void eigen(Matrix a, Vector& values, Matrix& vectors) {
  const size_t n = a.size();
  vectors.assign(n, Vector(n, 0.0));
  for (size_t i = 0; i < n; ++i) vectors[i][i] = 1;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) off += a[p][q] * a[p][q];
    if (off < 1e-30) break;
    for (size_t p = 0; p < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        if (std::abs(a[p][q]) < 1e-300) continue;
        const double theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // a <- a J
          const double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {  // a <- J^T a
          const double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (size_t k = 0; k < n; ++k) {
          const double vkp = vectors[k][p], vkq = vectors[k][q];
          vectors[k][p] = c * vkp - s * vkq;
          vectors[k][q] = s * vkp + c * vkq;
        }
      }
  }
  values.resize(n);
  for (size_t i = 0; i < n; ++i) values[i] = a[i][i];
}

json vector_json(const Vector& v) {
  json out = json::array();
  for (double x : v) out.push_back(x);
  return out;
}

Vector vector_of(const Field& f, size_t n) {
  if (f.items(n) != n) f.fail("expected " + std::to_string(n) + " numbers");
  Vector v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f[i].number();
  return v;
}

class CmaesSampler : public Sampler {
 public:
  // `spec` must outlive the sampler (it is its searcher's).
  CmaesSampler(const StudySpec& spec, const Field& options) : spec_(spec) {
    for (const Param& p : spec_.space.params())
      if (p.kind == DistKind::kGrid || p.kind == DistKind::kChoice)
        throw SpecError(spec_.space.written_at(p) +
                        ": cmaes searches uniform, loguniform and int leaves only; " + p.name +
                        " is a " + (p.kind == DistKind::kGrid ? "grid" : "choice") +
                        " (tpe handles those)");
    const size_t n = spec_.space.params().size();
    if (n == 0) throw SpecError("hyperparameters: cmaes needs a distribution to search");
    population_ = 4 + static_cast<int64_t>(std::floor(3 * std::log(double(n))));
    if (options.has("population")) population_ = options["population"].integer(2, 100'000);
    if (options.has("sigma0")) {
      sigma0_ = options["sigma0"].number();
      if (!(sigma0_ > 0 && sigma0_ <= 1))
        options["sigma0"].fail("expected a number in (0, 1] (of the range), got " +
                               brief(options["sigma0"].json()));
    }
    // Hansen's default strategy parameters for lambda = population_ in n dimensions.
    const int64_t mu = population_ / 2;
    for (int64_t i = 0; i < mu; ++i)
      weights_.push_back(std::log((double(population_) + 1) / 2) - std::log(double(i + 1)));
    double sum = 0, squares = 0;
    for (double w : weights_) sum += w;
    for (double& w : weights_) w /= sum;
    for (double w : weights_) squares += w * w;
    mu_eff_ = 1 / squares;
    const double d = double(n);
    c_sigma_ = (mu_eff_ + 2) / (d + mu_eff_ + 5);
    d_sigma_ = 1 + 2 * std::max(0.0, std::sqrt((mu_eff_ - 1) / (d + 1)) - 1) + c_sigma_;
    c_c_ = (4 + mu_eff_ / d) / (d + 4 + 2 * mu_eff_ / d);
    c_1_ = 2 / ((d + 1.3) * (d + 1.3) + mu_eff_);
    c_mu_ = std::min(1 - c_1_, 2 * (mu_eff_ - 2 + 1 / mu_eff_) / ((d + 2) * (d + 2) + mu_eff_));
    chi_n_ = std::sqrt(d) * (1 - 1 / (4 * d) + 1 / (21 * d * d));
    mean_.assign(n, 0.5);
    sigma_ = sigma0_;
    c_.assign(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i) c_[i][i] = 1;
    prior_distribution();
    p_sigma_.assign(n, 0.0);
    p_c_.assign(n, 0.0);
    decompose();
  }

  json save() const override {
    json c = json::array();
    for (const Vector& row : c_) c.push_back(vector_json(row));
    return {{"generation", generation_},
            {"generation_of", generation_of_},
            {"mean", vector_json(mean_)},
            {"sigma", sigma_},
            {"c", c},
            {"p_sigma", vector_json(p_sigma_)},
            {"p_c", vector_json(p_c_)}};
  }

  void load(const Field& f) override {
    f.check_keys({"generation", "generation_of", "mean", "sigma", "c", "p_sigma", "p_c"});
    const size_t n = mean_.size();
    const int64_t generation = f["generation"].integer(0, INT64_MAX);
    std::vector<int64_t> generation_of;
    for (size_t i = 0, k = f["generation_of"].items(0); i < k; ++i)
      generation_of.push_back(f["generation_of"][i].integer(0, generation));
    Vector mean = vector_of(f["mean"], n), p_sigma = vector_of(f["p_sigma"], n),
           p_c = vector_of(f["p_c"], n);
    const double sigma = f["sigma"].number();
    Matrix c;
    if (f["c"].items(n) != n) f["c"].fail("expected " + std::to_string(n) + " rows");
    for (size_t i = 0; i < n; ++i) c.push_back(vector_of(f["c"][i], n));
    generation_ = generation;
    generation_of_ = std::move(generation_of);
    mean_ = std::move(mean);
    sigma_ = sigma;
    c_ = std::move(c);
    p_sigma_ = std::move(p_sigma);
    p_c_ = std::move(p_c);
    decompose();
  }

  Params propose(uint64_t index, const SamplerView& view) override {
    tell(view);
    if (generation_of_.size() <= index) generation_of_.resize(index + 1, generation_);
    generation_of_[index] = generation_;
    const size_t n = mean_.size();
    CounterRandom random(spec_.seed, index);
    Vector x(n);
    for (int attempt = 0; attempt < 100; ++attempt) {
      Vector z(n);
      for (size_t k = 0; k < n; k += 2) {  // Box-Muller: two normals from two uniforms
        const double r = std::sqrt(-2 * std::log(1 - random.next()));
        const double angle = 2 * std::numbers::pi * random.next();
        z[k] = r * std::cos(angle);
        if (k + 1 < n) z[k + 1] = r * std::sin(angle);
      }
      bool inside = true;
      for (size_t k = 0; k < n; ++k) {
        double v = 0;
        for (size_t j = 0; j < n; ++j) v += b_[k][j] * d_[j] * z[j];
        x[k] = mean_[k] + sigma_ * v;
        inside = inside && x[k] >= 0 && x[k] <= 1;
      }
      if (inside) break;
    }
    for (double& v : x) v = std::clamp(v, 0.0, 1.0);
    return spec_.space.from_unit_coordinates(x);
  }

 private:
  // A warm start (WS-CMA-ES, Nomura et al., AAAI 2021, as Optuna's `source_trials` and the cmaes
  // library's get_warm_start_mgd with gamma = alpha = 0.1): the start is the distribution of the
  // best tenth (at least one) of the earlier trials trained to this study's length, widened by
  // alpha: Sigma = alpha^2 I + their covariance, sigma = det(Sigma)^(1 / 2n), C = Sigma / sigma^2,
  // the mean theirs. Without such trials it starts as without a warm start.
  void prior_distribution() {
    std::vector<std::pair<double, Vector>> source;  // (value, unit coordinates)
    for (const PriorTrial& t : spec_.prior)
      if (auto it = t.values.find(spec_.length_steps(t.params)); it != t.values.end())
        source.emplace_back(it->second, spec_.space.unit_coordinates(t.params));
    if (source.empty()) return;
    const bool maximize = spec_.searcher.maximize;
    std::stable_sort(source.begin(), source.end(), [&](const auto& a, const auto& b) {
      return better(a.first, b.first, maximize);
    });
    source.resize(std::max<size_t>(1, source.size() / 10));
    const size_t n = mean_.size();
    const double m = double(source.size()), alpha = 0.1;
    Vector mean(n, 0.0);
    for (const auto& [value, x] : source)
      for (size_t k = 0; k < n; ++k) mean[k] += x[k] / m;
    Matrix sigma(n, Vector(n, 0.0));
    for (size_t i = 0; i < n; ++i) {
      sigma[i][i] = alpha * alpha;
      for (size_t j = 0; j < n; ++j)
        for (const auto& [value, x] : source)
          sigma[i][j] += (x[i] - mean[i]) * (x[j] - mean[j]) / m;
    }
    Vector values;
    Matrix vectors;
    eigen(sigma, values, vectors);
    double log_det = 0;
    for (double v : values) log_det += std::log(std::max(v, 1e-300));
    sigma_ = std::exp(log_det / (2 * double(n)));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) c_[i][j] = sigma[i][j] / (sigma_ * sigma_);
    mean_ = std::move(mean);
  }

  // B and D of C = B diag(D^2) B^T, after every change of C.
  void decompose() {
    for (size_t i = 0; i < c_.size(); ++i)  // symmetric, up to rounding
      for (size_t j = 0; j < i; ++j) c_[i][j] = c_[j][i] = (c_[i][j] + c_[j][i]) / 2;
    Vector values;
    eigen(c_, values, b_);
    d_.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) d_[i] = std::sqrt(std::max(values[i], 1e-20));
  }

  // Once `population` observed trials are of this generation: the update, from the first
  // `population` of them by id (as Optuna tells them), and the next generation.
  void tell(const SamplerView& view) {
    std::vector<const SampledTrial*> done;
    for (const SampledTrial& t : view.observed)  // a warm start's trials (ids < 0) are none
      if (t.trial >= 0 && static_cast<size_t>(t.trial) < generation_of_.size() &&
          generation_of_[t.trial] == generation_)
        done.push_back(&t);
    if (static_cast<int64_t>(done.size()) < population_) return;
    done.resize(static_cast<size_t>(population_));
    const bool maximize = spec_.searcher.maximize;
    std::stable_sort(done.begin(), done.end(), [&](const SampledTrial* a, const SampledTrial* b) {
      return better(a->value, b->value, maximize);
    });
    const size_t n = mean_.size();
    std::vector<Vector> steps;  // (x_i - m) / sigma, best first
    for (size_t i = 0; i < weights_.size(); ++i) {
      Vector x = spec_.space.unit_coordinates(*done[i]->params);
      for (size_t k = 0; k < n; ++k) x[k] = (x[k] - mean_[k]) / sigma_;
      steps.push_back(std::move(x));
    }
    Vector y_w(n, 0.0);
    for (size_t i = 0; i < steps.size(); ++i)
      for (size_t k = 0; k < n; ++k) y_w[k] += weights_[i] * steps[i][k];
    for (size_t k = 0; k < n; ++k) mean_[k] += sigma_ * y_w[k];
    // C^(-1/2) y_w = B D^-1 B^T y_w.
    Vector bt(n, 0.0), whitened(n, 0.0);
    for (size_t j = 0; j < n; ++j)
      for (size_t k = 0; k < n; ++k) bt[j] += b_[k][j] * y_w[k];
    for (size_t j = 0; j < n; ++j) bt[j] /= d_[j];
    for (size_t k = 0; k < n; ++k)
      for (size_t j = 0; j < n; ++j) whitened[k] += b_[k][j] * bt[j];
    const double cs = std::sqrt(c_sigma_ * (2 - c_sigma_) * mu_eff_);
    double norm = 0;
    for (size_t k = 0; k < n; ++k) {
      p_sigma_[k] = (1 - c_sigma_) * p_sigma_[k] + cs * whitened[k];
      norm += p_sigma_[k] * p_sigma_[k];
    }
    norm = std::sqrt(norm);
    ++generation_;
    const bool h_sigma = norm / std::sqrt(1 - std::pow(1 - c_sigma_, 2.0 * double(generation_))) <
                         (1.4 + 2 / (double(n) + 1)) * chi_n_;
    const double cc = std::sqrt(c_c_ * (2 - c_c_) * mu_eff_);
    for (size_t k = 0; k < n; ++k) p_c_[k] = (1 - c_c_) * p_c_[k] + (h_sigma ? cc * y_w[k] : 0);
    const double delta = (1 - h_sigma) * c_c_ * (2 - c_c_);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        double rank_mu = 0;
        for (size_t s = 0; s < steps.size(); ++s)
          rank_mu += weights_[s] * steps[s][i] * steps[s][j];
        c_[i][j] = (1 + c_1_ * delta - c_1_ - c_mu_) * c_[i][j] + c_1_ * p_c_[i] * p_c_[j] +
                   c_mu_ * rank_mu;
      }
    sigma_ *= std::exp(c_sigma_ / d_sigma_ * (norm / chi_n_ - 1));
    decompose();
  }

  const StudySpec& spec_;
  int64_t population_ = 0;
  double sigma0_ = 1.0 / 6;
  Vector weights_;
  double mu_eff_ = 0, c_sigma_ = 0, d_sigma_ = 0, c_c_ = 0, c_1_ = 0, c_mu_ = 0, chi_n_ = 0;

  int64_t generation_ = 0;
  std::vector<int64_t> generation_of_;  // by trial id: the generation it was drawn in
  Vector mean_;
  double sigma_ = 0;
  Matrix c_;
  Vector p_sigma_, p_c_;
  Matrix b_;  // eigenvectors of c_ (columns)
  Vector d_;  // square roots of its eigenvalues
};

}  // namespace

std::unique_ptr<Sampler> make_cmaes_sampler(const StudySpec& spec, const Field& options) {
  return std::make_unique<CmaesSampler>(spec, options);
}

SearcherKind cmaes_searcher_kind() {
  std::vector<std::string> options = {"parallel"};
  for (const std::string& o : sampler_options().at("cmaes")) options.push_back(o);
  return {options, [](const StudySpec& s) { return make_sampler_searcher(s, "cmaes"); }, false,
          true};
}

}  // namespace hippo
