// What the population searchers (median_stop.h, and tpe.h, gp.h and cmaes.h through their
// samplers, sampler.h) share: a pool of trials, and counter-based randomness (pbt.h too).
//
// A pool runs up to max_trials trials, each to the spec's length with the spec's evaluation steps,
// keeping `parallel` of them in flight (default: the workers, with_parallel in searcher.h; 2 in a
// spec stored without it): when one ends (closed, stopped or failed) the next one is created, and
// the pool finishes once every trial has ended. The spec's enqueued configurations are its first
// trials; one enqueued while it runs (`hippo enqueue`, Searcher::enqueue) is its next, before the
// sampler's next proposal, and counts toward max_trials. Pool searchers differ in where a trial's
// params come from (propose: a sampler by default) and in whether a validation stops it
// (should_stop). A trial closed on a value that is not finite (diverged) counts as failed.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include "searchers/sampler.h"
#include "searchers/searcher.h"

namespace hippo {

// Uniform numbers in [0, 1): the n-th call is a pure function of (seed, stream, n), so a searcher
// only remembers which stream (e.g. the id of the trial being made) a decision used.
class CounterRandom {
 public:
  CounterRandom(uint64_t seed, uint64_t stream);
  double next() { return double(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

// A metric value in a saved state: a number, or "inf", "-inf" or "nan" (a diverged trial reaches a
// searcher as the worst value of its mode, an infinity, which JSON cannot hold).
nlohmann::json metric_to_json(double value);
double metric_from_json(const Field& field);

class PoolSearcher : public Searcher {
 public:
  std::vector<Operation> on_study_start() override { return fill(); }
  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override;
  std::vector<Operation> on_trial_closed(RequestId trial) override;
  std::vector<Operation> on_trial_failed(RequestId trial) override;
  nlohmann::json save() const override;
  void load(const nlohmann::json& state) override;
  std::optional<uint64_t> most_trials() const override { return max_trials_; }
  bool learns() const override { return sampler_ && sampler_->learns(); }
  std::vector<Operation> enqueue(const Params& params) override;

 protected:
  enum class Status { kRunning, kClosed, kStopped, kFailed };
  struct PoolTrial {
    Params params;
    std::map<int64_t, double> values;  // step -> the metric
    Status status = Status::kRunning;
  };

  // Reads `parallel` from the spec's searcher options.
  PoolSearcher(const StudySpec& spec, uint64_t max_trials);
  // The params of trial `index` (the trials before it are in trials_): by default the sampler's,
  // from what the pool has seen (view()).
  virtual Params propose(uint64_t index) { return sampler_->propose(index, view()); }
  // Whether to stop the running trial now that its value at `step` is recorded.
  virtual bool should_stop(RequestId trial, int64_t step) = 0;

  // Whether metric value a is better than b (the spec's mode).
  bool better(double a, double b) const { return hippo::better(a, b, spec_.searcher.maximize); }
  // A sampler's view of the pool: the closed trials whose last value is finite (observed), after
  // a warm start's trials at this study's length for their params, and the running ones, by id.
  SamplerView view() const;

  const StudySpec spec_;
  std::vector<PoolTrial> trials_;  // by id
  // Where values come from (made from spec_ by the derived class); its state is saved with the
  // pool's, as "sampler", when it has any.
  std::unique_ptr<Sampler> sampler_;

 private:
  PoolTrial& at(RequestId trial);
  std::vector<Operation> end(RequestId trial, Status status);
  // Creates trials up to `parallel` in flight; Finish once all max_trials have ended.
  std::vector<Operation> fill();

  uint64_t max_trials_;
  int64_t parallel_;
  std::deque<Params> queued_;  // enqueued while it runs, not created yet
};

// A pool searcher whose values come from the sampler `name` (its options the searcher's) and that
// stops no trial: the `tpe`, `gp` and `cmaes` searchers. max_trials is required.
std::unique_ptr<Searcher> make_sampler_searcher(const StudySpec& spec, const std::string& name);

}  // namespace hippo
