#include "searchers/pool_searcher.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "searchers/basic.h"
#include "stagetree/json_number.h"

namespace hippo {
namespace {

const char* const kStatusNames[] = {"running", "closed", "stopped", "failed"};

}  // namespace

CounterRandom::CounterRandom(uint64_t seed, uint64_t stream) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(stream), uint32_t(stream >> 32)};
  engine_.seed(seq);
}

nlohmann::json metric_to_json(double value) {
  return json_number(value);
}

double metric_from_json(const Field& field) {
  if (std::optional<double> v = number_of_json(field.json())) return *v;
  return field.number();  // fails, naming the field
}

PoolSearcher::PoolSearcher(const StudySpec& spec, uint64_t max_trials)
    : spec_(spec), max_trials_(max_trials) {
  Field options(spec.searcher.options, "searcher");
  parallel_ = options.has("parallel") ? options["parallel"].integer(1, 1'000'000) : 2;
}

std::vector<Operation> PoolSearcher::on_validation(RequestId trial, int64_t step, double value) {
  PoolTrial& t = at(trial);
  if (t.status != Status::kRunning) return {};
  t.values[step] = value;
  if (!should_stop(trial, step)) return {};
  std::vector<Operation> ops = {Stop{trial}};
  for (Operation& op : end(trial, Status::kStopped)) ops.push_back(std::move(op));
  return ops;
}

// The master feeds a diverged trial the worst value of its mode (an infinity) and then closes it:
// such a trial never completed, it failed (Optuna's FAIL), and median_stop never counts it. So
// does a trial whose last evaluation broke a constraint (it has the same worst value there).
std::vector<Operation> PoolSearcher::on_trial_closed(RequestId trial) {
  const PoolTrial& t = at(trial);
  bool diverged = !t.values.empty() && !std::isfinite(t.values.rbegin()->second);
  return end(trial, diverged ? Status::kFailed : Status::kClosed);
}

std::vector<Operation> PoolSearcher::on_trial_failed(RequestId trial) {
  return end(trial, Status::kFailed);
}

SamplerView PoolSearcher::view() const {
  SamplerView v;
  for (auto& [length, trials] : prior_by_level(spec_, [&](const Params& params) {
         return std::vector<int64_t>{spec_.length_steps(params)};
       }))
    v.observed.insert(v.observed.end(), trials.begin(), trials.end());
  std::sort(v.observed.begin(), v.observed.end(),
            [](const SampledTrial& a, const SampledTrial& b) { return a.trial < b.trial; });
  for (size_t i = 0; i < trials_.size(); ++i) {
    const PoolTrial& t = trials_[i];
    const RequestId id = static_cast<RequestId>(i);
    if (t.status == Status::kRunning)
      v.running.push_back({id, &t.params, 0});
    else if (t.status == Status::kClosed && !t.values.empty() &&
             std::isfinite(t.values.rbegin()->second))
      v.observed.push_back({id, &t.params, t.values.rbegin()->second});
  }
  return v;
}

PoolSearcher::PoolTrial& PoolSearcher::at(RequestId trial) {
  if (trial < 0 || static_cast<size_t>(trial) >= trials_.size())
    throw std::invalid_argument(spec_.searcher.name + " searcher: no trial " +
                                std::to_string(trial));
  return trials_[trial];
}

std::vector<Operation> PoolSearcher::end(RequestId trial, Status status) {
  PoolTrial& t = at(trial);
  if (t.status != Status::kRunning) return {};
  t.status = status;
  return fill();
}

std::vector<Operation> PoolSearcher::enqueue(const Params& params) {
  if (trials_.size() + queued_.size() >= max_trials_)
    throw std::invalid_argument("all its max_trials (" + std::to_string(max_trials_) +
                                ") trials are created or enqueued already");
  queued_.push_back(params);
  return fill();
}

std::vector<Operation> PoolSearcher::fill() {
  int64_t running = std::count_if(trials_.begin(), trials_.end(),
                                  [](const PoolTrial& t) { return t.status == Status::kRunning; });
  std::vector<Operation> ops;
  for (; running < parallel_ && trials_.size() < max_trials_; ++running) {
    RequestId id = static_cast<RequestId>(trials_.size());
    Params params;
    if (trials_.size() < spec_.enqueued.size()) {
      params = spec_.enqueued[trials_.size()];
    } else if (!queued_.empty()) {
      params = std::move(queued_.front());
      queued_.pop_front();
    } else {
      params = propose(trials_.size());
    }
    ops.emplace_back(Create{id, params, std::nullopt});
    ops.emplace_back(Train{id, spec_.length_steps(params), spec_.eval_steps(params)});
    trials_.push_back({std::move(params), {}, Status::kRunning});
  }
  if (running == 0) ops.emplace_back(Finish{});
  return ops;
}

nlohmann::json PoolSearcher::save() const {
  nlohmann::json trials = nlohmann::json::array();
  for (const PoolTrial& t : trials_) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& [step, value] : t.values) values.push_back({step, metric_to_json(value)});
    trials.push_back({{"params", t.params},
                      {"values", values},
                      {"status", kStatusNames[static_cast<int>(t.status)]}});
  }
  nlohmann::json out = {{"trials", trials}};
  if (nlohmann::json sampler = sampler_ ? sampler_->save() : nullptr; !sampler.is_null())
    out["sampler"] = std::move(sampler);
  if (!queued_.empty()) out["queued"] = nlohmann::json(queued_);
  return out;
}

void PoolSearcher::load(const nlohmann::json& state) {
  Field f(state, "state");
  f.check_keys({"trials", "sampler", "queued"});
  Field list = f["trials"];
  std::vector<PoolTrial> trials(list.items(0));
  if (trials.size() > max_trials_) list.fail("more than max_trials trials");
  for (size_t i = 0; i < trials.size(); ++i) {
    Field t = list[i];
    t.check_keys({"params", "values", "status"});
    if (!t["params"].is_object()) t["params"].fail("expected an object");
    trials[i].params = t["params"].json();
    Field values = t["values"];
    for (size_t j = 0, n = values.items(0); j < n; ++j) {
      if (values[j].items(2) != 2) values[j].fail("expected [step, value]");
      trials[i].values[values[j][0].integer(0, INT64_MAX)] = metric_from_json(values[j][1]);
    }
    const std::string& status = t["status"].text();
    auto it = std::find(std::begin(kStatusNames), std::end(kStatusNames), status);
    if (it == std::end(kStatusNames)) t["status"].fail("unknown status " + brief(status));
    trials[i].status = static_cast<Status>(it - std::begin(kStatusNames));
  }
  std::deque<Params> queued;
  if (f.has("queued"))
    for (size_t i = 0, n = f["queued"].items(1); i < n; ++i) {
      if (!f["queued"][i].is_object()) f["queued"][i].fail("expected an object");
      queued.push_back(f["queued"][i].json());
    }
  if (trials.size() + queued.size() > max_trials_) f["queued"].fail("more than max_trials trials");
  trials_ = std::move(trials);
  queued_ = std::move(queued);
  if (f.has("sampler") && sampler_) sampler_->load(f["sampler"]);
}

namespace {

class SamplerSearcher final : public PoolSearcher {
 public:
  SamplerSearcher(const StudySpec& spec, const std::string& name)
      : PoolSearcher(spec, max_trials(spec, name)) {
    sampler_ = make_sampler(spec_, name, Field(spec_.searcher.options, "searcher"),
                            *spec_.searcher.max_trials, SamplerUse::kAlone);
  }

 private:
  static uint64_t max_trials(const StudySpec& spec, const std::string& name) {
    if (!spec.searcher.max_trials)
      Field(spec.searcher.options, "searcher.max_trials").fail("missing (" + name + " needs it)");
    return *spec.searcher.max_trials;
  }
  bool should_stop(RequestId, int64_t) override { return false; }
};

}  // namespace

std::unique_ptr<Searcher> make_sampler_searcher(const StudySpec& spec, const std::string& name) {
  return std::make_unique<SamplerSearcher>(spec, name);
}

}  // namespace hippo
