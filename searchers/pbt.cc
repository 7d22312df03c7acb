#include "searchers/pbt.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "searchers/pool_searcher.h"

namespace hippo {
namespace {

using nlohmann::json;

class PbtSearcher : public Searcher {
 public:
  explicit PbtSearcher(const StudySpec& spec) : spec_(spec) {
    Field options(spec.searcher.options, "searcher");
    if (spec.searcher.max_trials)
      Field(spec.searcher.options, "searcher.max_trials")
          .fail("pbt creates population + replacement trials; leave max_trials out");
    population_ = options["population"].integer(2, 1'000'000);
    Span interval = parse_span(options["interval"]);
    if (options.has("fraction")) {
      fraction_ = options["fraction"].number();
      if (fraction_ <= 0 || fraction_ > 0.5)
        options["fraction"].fail("expected a number in (0, 0.5], got " +
                                 brief(options["fraction"].json()));
    }
    if (options.has("perturb")) {
      Field perturb = options["perturb"];
      perturb_.clear();
      for (size_t i = 0, n = perturb.items(1); i < n; ++i) {
        perturb_.push_back(perturb[i].number());
        if (perturb_.back() <= 0)
          perturb[i].fail("expected a factor > 0, got " + brief(perturb[i].json()));
      }
    }
    if (options.has("resample")) {
      resample_ = options["resample"].number();
      if (resample_ < 0 || resample_ > 1)
        options["resample"].fail("expected a number in [0, 1], got " +
                                 brief(options["resample"].json()));
    }
    for (const std::string& name : spec.space.names()) {
      const json* value = spec.space.value_of(name);
      if (value->is_object() && value->contains("schedule"))
        Field(*value, "hyperparameters." + name)
            .fail(
                "pbt needs a constant or a distribution (it changes values between "
                "generations, which a schedule's would not survive)");
    }
    bool epochs = interval.epochs || spec.length.epochs;
    for (const Param& p : spec.space.params())
      if (p.name == "batch_size" && epochs)
        Field(*spec.space.value_of("batch_size"), "hyperparameters.batch_size")
            .fail(
                "pbt holds its members in lock step: with a drawn batch size (own epochs per "
                "member) give length and interval in steps");
    Params any = spec.space.draw(spec.seed, 0, std::nullopt);
    interval_ = interval.steps(spec.steps_per_epoch(any));
    length_ = spec.length_steps(any);
    if (interval_ < 1) options["interval"].fail("an epoch has no steps here; give steps");
  }

  // The population, and at each later generation the members it replaces: at most all but one
  // (the worst q, and every member that failed).
  std::optional<uint64_t> most_trials() const override {
    int64_t generations = (length_ + interval_ - 1) / interval_;
    return static_cast<uint64_t>(population_ + (generations - 1) * (population_ - 1));
  }

  std::vector<Operation> on_study_start() override {
    std::vector<Operation> ops;
    target_ = std::min(interval_, length_);
    for (RequestId id = 0; id < population_; ++id) {
      Params params = spec_.space.draw(spec_.seed, id, std::nullopt);
      ops.emplace_back(Create{id, params, std::nullopt});
      ops.emplace_back(Train{id, target_, evals(params, 0)});
      members_.push_back({id, std::move(params), std::nullopt, false, false});
    }
    next_id_ = population_;
    return ops;
  }

  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override {
    Member* m = find(trial);
    if (m && step == target_) m->value = value;
    return {};
  }

  // A member closed without a finite value at the generation's end diverged (the master fed it
  // the worst value of its mode where it diverged, then closed it; its evaluations always include
  // target_): it is replaced like a failed one, never trained on from a diverged state. So is one
  // that breaks a constraint there (the same worst value).
  std::vector<Operation> on_trial_closed(RequestId trial) override {
    if (Member* m = find(trial)) {
      m->reported = true;
      if (!m->value || !std::isfinite(*m->value)) {
        m->failed = true;
        m->value.reset();
      }
    }
    return advance();
  }

  // A failed member keeps its place until its generation ends; then it is replaced like the worst.
  std::vector<Operation> on_trial_failed(RequestId trial) override {
    if (Member* m = find(trial)) {
      m->failed = m->reported = true;
      m->value.reset();
    }
    return advance();
  }

  json save() const override {
    json members = json::array();
    for (const Member& m : members_)
      members.push_back({{"trial", m.trial},
                         {"params", m.params},
                         {"value", m.value ? metric_to_json(*m.value) : json(nullptr)},
                         {"reported", m.reported},
                         {"failed", m.failed}});
    return {{"target", target_}, {"next_id", next_id_}, {"members", members}};
  }

  void load(const json& state) override {
    Field f(state, "state");
    f.check_keys({"target", "next_id", "members"});
    int64_t target = f["target"].integer(0, length_);
    RequestId next_id = f["next_id"].integer(0, INT64_MAX);
    std::vector<Member> members;
    Field list = f["members"];
    for (size_t i = 0, n = list.items(0); i < n; ++i) {
      Field m = list[i];
      m.check_keys({"trial", "params", "value", "reported", "failed"});
      if (!m["params"].is_object()) m["params"].fail("expected an object");
      std::optional<double> value;
      if (!m["value"].json().is_null()) value = metric_from_json(m["value"]);
      // States saved before failed members were kept have none ("failed" absent).
      bool failed = m.has("failed") && m["failed"].boolean();
      members.push_back({m["trial"].integer(0, next_id - 1), m["params"].json(), value,
                         m["reported"].boolean(), failed});
    }
    target_ = target;
    next_id_ = next_id;
    members_ = std::move(members);
  }

 private:
  struct Member {
    RequestId trial;
    Params params;
    std::optional<double> value;  // at target_
    bool reported;                // closed at target_ (or failed)
    bool failed;                  // its training failed in this generation: to be replaced
  };

  Member* find(RequestId trial) {
    if (trial < 0 || trial >= next_id_)
      throw std::invalid_argument("pbt searcher: no trial " + std::to_string(trial));
    for (Member& m : members_)
      if (m.trial == trial) return &m;
    return nullptr;  // replaced already
  }

  // The spec's evaluation steps in (from, target_], and target_.
  std::vector<int64_t> evals(const Params& params, int64_t from) const {
    std::vector<int64_t> out;
    for (int64_t s : spec_.eval_steps(params))
      if (s > from && s < target_) out.push_back(s);
    out.push_back(target_);
    return out;
  }

  // Once every member has reported: the next generation, or the end.
  std::vector<Operation> advance() {
    for (const Member& m : members_)
      if (!m.reported) return {};
    // Best first; a member without a value after those with one, failed members last.
    std::vector<size_t> rank(members_.size());
    for (size_t i = 0; i < rank.size(); ++i) rank[i] = i;
    std::stable_sort(rank.begin(), rank.end(), [&](size_t a, size_t b) {
      const Member &x = members_[a], &y = members_[b];
      if (x.failed != y.failed) return y.failed;
      if (!x.value || !y.value) return x.value.has_value() > y.value.has_value();
      return spec_.searcher.maximize ? *x.value > *y.value : *x.value < *y.value;
    });
    const int64_t n = static_cast<int64_t>(members_.size());
    const int64_t failed =
        std::count_if(members_.begin(), members_.end(), [](const Member& m) { return m.failed; });
    if (failed == n || target_ == length_) return {Finish{}};
    // The worst q are replaced, and every failed member (the population keeps its size); donors
    // come from the best q that are alive. q <= n / 2, so donors are never replaced.
    const int64_t q = std::min(n / 2, std::max<int64_t>(1, std::llround(fraction_ * double(n))));
    const int64_t replaced = std::max(q, failed), donors = std::min(q, n - failed);
    std::vector<Operation> ops;
    std::vector<Member> next;
    for (int64_t i = 0; i < n - replaced; ++i) next.push_back(members_[rank[i]]);
    for (int64_t i = 0; i < replaced; ++i) {
      const Member& loser = members_[rank[n - 1 - i]];
      RequestId id = next_id_++;
      CounterRandom random(spec_.seed, id);
      const Member& donor =
          members_[rank[std::min(donors - 1, int64_t(random.next() * double(donors)))]];
      Params params = explore(donor.params, id, random);
      if (!loser.failed) ops.emplace_back(Stop{loser.trial});
      ops.emplace_back(Create{id, params, Fork{donor.trial, target_}});
      next.push_back({id, std::move(params), std::nullopt, false, false});
    }
    std::sort(next.begin(), next.end(),
              [](const Member& a, const Member& b) { return a.trial < b.trial; });
    int64_t from = target_;
    target_ = std::min(target_ + interval_, length_);
    for (Member& m : next) {
      m.value.reset();
      m.reported = false;
      ops.emplace_back(Train{m.trial, target_, evals(m.params, from)});
    }
    members_ = std::move(next);
    return ops;
  }

  Params explore(const Params& donor, RequestId id, CounterRandom& random) const {
    Params out = donor;
    Params fresh = spec_.space.draw(spec_.seed, id, std::nullopt);
    for (const Param& p : spec_.space.params()) {
      // A fork goes on from its donor's state, so it keeps the donor's architecture.
      if (p.in_model()) continue;
      if (random.next() < resample_) {
        out[p.name] = fresh[p.name];
        continue;
      }
      if (p.kind == DistKind::kGrid || p.kind == DistKind::kChoice) continue;
      double factor =
          perturb_[std::min(perturb_.size() - 1, size_t(random.next() * double(perturb_.size())))];
      double x = std::clamp(donor[p.name].get<double>() * factor, p.lo, p.hi);
      if (p.kind == DistKind::kInt)
        out[p.name] = int64_t(std::round(x));
      else
        out[p.name] = x;
    }
    return out;
  }

  const StudySpec spec_;
  int64_t population_ = 0;
  double fraction_ = 0.25;
  std::vector<double> perturb_ = {0.8, 1.2};
  double resample_ = 0.25;
  int64_t interval_ = 0, length_ = 0;  // in steps

  int64_t target_ = 0;  // the step every member is trained to in this generation
  RequestId next_id_ = 0;
  std::vector<Member> members_;  // alive, by trial id
};

}  // namespace

SearcherKind pbt_searcher_kind() {
  return {{"population", "interval", "fraction", "perturb", "resample"},
          [](const StudySpec& s) { return std::make_unique<PbtSearcher>(s); }};
}

}  // namespace hippo
