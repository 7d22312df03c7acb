// Samplers: where a new trial's values come from (Optuna's samplers), apart from when trials start
// and stop (the schedulers). `random`, `sobol`, `tpe`, `gp` and `cmaes` are searchers of their own
// (a pool of trials, pool_searcher.h, each trained to the spec's length) and, as
// `"searcher": {"name": "asha", ..., "sampler": {"name": "tpe", ...}}`, the proposers inside the
// schedulers that create trials as they go (asha, sha, hyperband, median_stop).
//
// A sampler is asked for trial `index`'s values with what the study has seen: observations
// (params and one value each: a pool's closed trials at their last value; a scheduler's trials at
// one level, below) and the trials in flight (for a constant liar). Its randomness comes from
// (seed, index), so the same history gives the same proposal; cmaes also keeps a distribution
// across generations (save/load).
//
// Inside a scheduler a model learns by the BOHB rule (Falkner et al., ICML 2018, as its reference
// implementation HpBandSter has it): of the levels a trial is judged at (a halving scheduler's rung
// lengths, median_stop's evaluation steps), the highest one where the trials with a finite value
// fill both of BOHB's sets, a good set of max(d + 1, 15%) and a bad set of at least d + 1 more
// (d leaves; d + 1 is BOHB's min_points_in_model); below that nowhere, no observation (the models
// then draw from their prior). tpe there splits by BOHB's good-set size and draws a third of its
// proposals at random (BOHB's random_fraction). The trials in flight are the constant liar (tpe)
// or the kriging believer (gp) there.
//
// A warm start (StudySpec::prior, the spec's `warm_start`) adds earlier studies' trials to the
// observations, at the same levels: a pool's at this study's length for the trial's params (as its
// own closed trials), a scheduler's at each of its levels. They are older than the study's own
// (ids -n .. -1) and count toward tpe's and gp's n_startup (Optuna counts every complete trial,
// added ones too); cmaes starts from their best instead (WS-CMA-ES, prior_distribution).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "searchers/field.h"
#include "searchers/spec.h"

namespace hippo {

using RequestId = int64_t;

// A trial as a sampler sees it.
struct SampledTrial {
  RequestId trial = 0;  // < 0: an earlier study's (a warm start)
  const Params* params = nullptr;
  double value = 0;  // observations only: finite, in the spec's mode
};

struct SamplerView {
  std::vector<SampledTrial> observed;  // by trial id
  std::vector<SampledTrial> running;   // by trial id (no value)
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual Params propose(uint64_t index, const SamplerView& view) = 0;
  // Whether its proposals depend on the observations (tpe, gp, cmaes): a model.
  virtual bool learns() const { return true; }
  // What it keeps beyond the trials (cmaes: its distribution); null when nothing.
  virtual nlohmann::json save() const { return nullptr; }
  virtual void load(const Field&) {}
};

// The samplers' names and their options (besides `name`).
const std::map<std::string, std::vector<std::string>>& sampler_options();

// Where a sampler proposes: as a searcher of its own (a pool), or inside a scheduler (BOHB's rule).
enum class SamplerUse { kAlone, kInScheduler };

// The sampler `name` (a key of sampler_options()), its options read from `options` (the searcher's
// options for a sampler searcher, `searcher.sampler` inside a scheduler). `trials`: the most
// trials it may be asked for (gp refuses more than 300). `spec` must outlive it.
std::unique_ptr<Sampler> make_sampler(const StudySpec& spec, const std::string& name,
                                      const Field& options, uint64_t trials, SamplerUse use);

// A scheduler's sampler, `searcher.sampler`: null when the spec has none; its keys checked.
std::unique_ptr<Sampler> scheduler_sampler(const StudySpec& spec, uint64_t trials);

// BOHB's good-set size of n observations over d leaves: max(d + 1, floor(15% of n)).
size_t bohb_good_count(size_t leaves, size_t n);

// BOHB's rule over observations by level (a step): the highest level whose observations fill a good
// set (bohb_good_count) and leave at least d + 1 for the bad set, or none.
std::vector<SampledTrial> bohb_observations(
    const StudySpec& spec, const std::map<int64_t, std::vector<SampledTrial>>& by_level);

// The warm start's observations by level: each prior trial's value at each step of levels(params)
// where it has one, the i-th of n with id i - n.
std::map<int64_t, std::vector<SampledTrial>> prior_by_level(
    const StudySpec& spec, const std::function<std::vector<int64_t>(const Params&)>& levels);
// The prior trials among the observations (tpe's and gp's n_startup count them).
uint64_t prior_observed(const SamplerView& view);

// Each sampler's factory (tpe.cc, gp.cc, cmaes.cc; random and sobol in sampler.cc).
std::unique_ptr<Sampler> make_tpe_sampler(const StudySpec& spec, const Field& options,
                                          SamplerUse use);
std::unique_ptr<Sampler> make_gp_sampler(const StudySpec& spec, const Field& options,
                                         uint64_t trials);
std::unique_ptr<Sampler> make_cmaes_sampler(const StudySpec& spec, const Field& options);

}  // namespace hippo
