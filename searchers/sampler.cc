#include "searchers/sampler.h"

#include <algorithm>
#include <stdexcept>

#include "searchers/sobol.h"

namespace hippo {
namespace {

// Seeded draws of every leaf (a grid leaf as a choice): `random` search's values.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(const StudySpec& spec) : spec_(spec) {}
  Params propose(uint64_t index, const SamplerView&) override {
    return spec_.space.draw(spec_.seed, index, std::nullopt);
  }
  bool learns() const override { return false; }

 private:
  const StudySpec& spec_;
};

// Point `index` of the seeded scrambled Sobol sequence (sobol.h).
class SobolSampler : public Sampler {
 public:
  SobolSampler(const StudySpec& spec, const Field& options) : spec_(spec) {
    check_sobol_leaves(spec.space.params().size(), options["name"]);
  }
  Params propose(uint64_t index, const SamplerView&) override {
    return spec_.space.at(sobol_point(index, spec_.space.params().size(), spec_.seed),
                          std::nullopt);
  }
  bool learns() const override { return false; }

 private:
  const StudySpec& spec_;
};

}  // namespace

const std::map<std::string, std::vector<std::string>>& sampler_options() {
  static const std::map<std::string, std::vector<std::string>> options = {
      {"random", {}},
      {"sobol", {}},
      {"tpe",
       {"n_startup", "gamma", "candidates", "prior_weight", "multivariate", "constant_liar",
        "random_fraction"}},
      {"gp", {"n_startup", "candidates"}},
      {"cmaes", {"population", "sigma0"}},
  };
  return options;
}

std::unique_ptr<Sampler> make_sampler(const StudySpec& spec, const std::string& name,
                                      const Field& options, uint64_t trials, SamplerUse use) {
  if (name == "random") return std::make_unique<RandomSampler>(spec);
  if (name == "sobol") return std::make_unique<SobolSampler>(spec, options);
  if (name == "tpe") return make_tpe_sampler(spec, options, use);
  if (name == "gp") return make_gp_sampler(spec, options, trials);
  if (name == "cmaes") return make_cmaes_sampler(spec, options);
  throw std::invalid_argument("no sampler " + name);
}

std::unique_ptr<Sampler> scheduler_sampler(const StudySpec& spec, uint64_t trials) {
  Field searcher(spec.searcher.options, "searcher");
  if (!searcher.has("sampler")) return nullptr;
  Field options = searcher["sampler"];
  if (!options.is_object()) options.fail("expected an object: {\"name\": ..., its options}");
  const std::string& name = options["name"].text();
  auto it = sampler_options().find(name);
  if (it == sampler_options().end()) {
    std::string known;
    for (const auto& [n, o] : sampler_options()) known += (known.empty() ? "" : ", ") + n;
    options["name"].fail("unknown sampler " + brief(options["name"].json()) + " (known: " + known +
                         ")");
  }
  std::vector<std::string_view> keys = {"name"};
  keys.insert(keys.end(), it->second.begin(), it->second.end());
  options.check_keys(keys);
  return make_sampler(spec, name, options, trials, SamplerUse::kInScheduler);
}

std::map<int64_t, std::vector<SampledTrial>> prior_by_level(
    const StudySpec& spec, const std::function<std::vector<int64_t>(const Params&)>& levels) {
  std::map<int64_t, std::vector<SampledTrial>> by_level;
  const RequestId n = static_cast<RequestId>(spec.prior.size());
  for (RequestId i = 0; i < n; ++i) {
    const PriorTrial& t = spec.prior[i];
    for (int64_t level : levels(t.params))
      if (auto it = t.values.find(level); it != t.values.end())
        by_level[level].push_back({i - n, &t.params, it->second});
  }
  return by_level;
}

uint64_t prior_observed(const SamplerView& view) {
  return std::count_if(view.observed.begin(), view.observed.end(),
                       [](const SampledTrial& t) { return t.trial < 0; });
}

std::vector<SampledTrial> bohb_observations(
    const StudySpec& spec, const std::map<int64_t, std::vector<SampledTrial>>& by_level) {
  const size_t leaves = spec.space.params().size();
  for (auto it = by_level.rbegin(); it != by_level.rend(); ++it) {
    const size_t n = it->second.size();
    if (n >= bohb_good_count(leaves, n) + leaves + 1) return it->second;
  }
  return {};
}

size_t bohb_good_count(size_t leaves, size_t n) {
  return std::max(leaves + 1, n * 15 / 100);
}

}  // namespace hippo
