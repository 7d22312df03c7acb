#include "searchers/halving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "searchers/basic.h"
#include "searchers/pareto.h"
#include "searchers/sampler.h"
#include "stagetree/json_number.h"

namespace hippo {
namespace {

using nlohmann::json;

enum class Kind { kSha, kAsha, kMoAsha, kHyperband };

// A length option, read as spec.cc reads the spec's `length`.
int64_t at_least(const Field& f, int64_t min) {
  int64_t v = f.integer(INT64_MIN, INT64_MAX);
  if (v < min) f.fail("expected an integer >= " + std::to_string(min) + ", got " + brief(f.json()));
  return v;
}

// Callers keep base^exponent within a rung length, far from overflow.
int64_t power(int64_t base, int exponent) {
  int64_t p = 1;
  for (int i = 0; i < exponent; ++i) p *= base;
  return p;
}

// Trials that start together at rung 0 and are halved together (asha has one bracket that it
// fills as it goes).
struct Bracket {
  RequestId first = 0;  // its trials are first .. first + size - 1
  int64_t size = 0;
  int rungs = 0;
  int64_t iteration = 0;  // hyperband: which pass over the bracket sequence it belongs to
};

struct TrialState {
  size_t bracket = 0;
  Params params;
  bool given = false;   // its params came from `hippo enqueue` (kept in the saved state)
  bool running = true;  // being trained to its current rung: neither closed nor failed yet
  // The value at each rung it reached; the last one is at its current rung (none until reported).
  // One value and no violation, except for moasha: every objective's value and the violation.
  std::vector<std::optional<ParetoPoint>> values{std::nullopt};

  int rung() const { return static_cast<int>(values.size()) - 1; }
};

// asha's and moasha's view of one rung: the trials that finished it with a value, promoted since
// or not (the rung's ranking), and which of them still wait there. The two differ only in how they
// order a rung.
class RungRanking {
 public:
  virtual ~RungRanking() = default;
  // The trial finished the rung with value `p` there.
  virtual void add(RequestId id, const ParetoPoint& p) = 0;
  // It goes on to the next rung: it stays in the ranking (its value counts for the others), but
  // waits no more.
  virtual void promote(RequestId id, const ParetoPoint& p) = 0;
  // The best waiting trial, when its place in the ranking is below floor(count / eta).
  virtual std::optional<RequestId> promotable(int64_t eta) const = 0;
  // The trials that wait there, not promoted, best first.
  virtual std::vector<RequestId> waiting() const = 0;
};

// A trial's place in a rung's ranking: its value there (negated when the mode is max) and its id,
// so that pairs in their natural order are best first, ties to the lower id.
using RankKey = std::pair<double, RequestId>;
// A set of keys that also tells how many keys come before one, in O(log n).
using RankTree =
    __gnu_pbds::tree<RankKey, __gnu_pbds::null_type, std::less<RankKey>, __gnu_pbds::rb_tree_tag,
                     __gnu_pbds::tree_order_statistics_node_update>;

// asha: by the one value, kept up to date so that an event costs O(log n), not a sort of every
// trial: with a study of 100,000 trials, re-ranking on each event would be quadratic.
class ValueRanking : public RungRanking {
 public:
  explicit ValueRanking(bool maximize) : maximize_(maximize) {}
  void add(RequestId id, const ParetoPoint& p) override {
    ranked_.insert(key(id, p));
    waiting_.insert(key(id, p));
  }
  void promote(RequestId id, const ParetoPoint& p) override { waiting_.erase(key(id, p)); }
  // Every trial ranked before the first waiting one has been promoted already.
  std::optional<RequestId> promotable(int64_t eta) const override {
    if (waiting_.empty()) return std::nullopt;
    const RankKey& best = *waiting_.begin();
    if (ranked_.order_of_key(best) < ranked_.size() / static_cast<size_t>(eta)) return best.second;
    return std::nullopt;
  }
  std::vector<RequestId> waiting() const override {
    std::vector<RequestId> ids;
    for (const RankKey& k : waiting_) ids.push_back(k.second);
    return ids;
  }

 private:
  RankKey key(RequestId id, const ParetoPoint& p) const {
    return {maximize_ ? -p.values[0] : p.values[0], id};
  }
  bool maximize_;
  RankTree ranked_;
  std::set<RankKey> waiting_;  // in the same order
};

// moasha: by (front of constrained non-dominated sorting, larger crowding distance, lower id).
// A new trial can move others to later fronts and changes crowding distances, so no incremental
// index keeps this order: the rung is sorted again when a trial joins it and a promotion is looked
// for, O(n log n) with up to two objectives (pareto.h's sweep), O(objectives * n^2) with more.
class ParetoRanking : public RungRanking {
 public:
  explicit ParetoRanking(Directions directions) : directions_(std::move(directions)) {}
  void add(RequestId id, const ParetoPoint& p) override {
    members_.emplace(id, p);
    waiting_.insert(id);
    order_.clear();
  }
  void promote(RequestId id, const ParetoPoint&) override { waiting_.erase(id); }
  std::optional<RequestId> promotable(int64_t eta) const override {
    if (waiting_.empty()) return std::nullopt;
    if (order_.empty()) order_ = ranking();
    const size_t limit = order_.size() / static_cast<size_t>(eta);
    for (size_t place = 0; place < limit; ++place)
      if (waiting_.count(order_[place])) return order_[place];
    return std::nullopt;
  }
  std::vector<RequestId> waiting() const override {  // in the ranking's order, as asha's
    if (order_.empty()) order_ = ranking();
    std::vector<RequestId> ids;
    for (RequestId id : order_)
      if (waiting_.count(id)) ids.push_back(id);
    return ids;
  }

 private:
  // The rung's trials, best first. With one objective a front holds equal values, where crowding
  // says nothing: ties go to the lower id, so that moasha ranks exactly as asha.
  std::vector<RequestId> ranking() const {
    // In id order, not the order trials joined (which a reloaded searcher does not know): crowding
    // gives the ends of a run of equal values to the first and last of them.
    std::vector<RequestId> ids;
    std::vector<ParetoPoint> points;
    for (const auto& [id, p] : members_) {
      ids.push_back(id);
      points.push_back(p);
    }
    struct Place {
      size_t front;
      double crowding;
      RequestId id;
    };
    std::vector<Place> places;
    const std::vector<std::vector<size_t>> fronts = non_dominated_sort(points, directions_);
    for (size_t f = 0; f < fronts.size(); ++f) {
      std::vector<double> crowding = directions_.size() > 1
                                         ? crowding_distance(points, fronts[f])
                                         : std::vector<double>(fronts[f].size(), 0.0);
      for (size_t k = 0; k < fronts[f].size(); ++k)
        places.push_back({f, crowding[k], ids[fronts[f][k]]});
    }
    std::sort(places.begin(), places.end(), [](const Place& a, const Place& b) {
      if (a.front != b.front) return a.front < b.front;
      if (a.crowding != b.crowding) return a.crowding > b.crowding;
      return a.id < b.id;
    });
    std::vector<RequestId> order;
    for (const Place& p : places) order.push_back(p.id);
    return order;
  }

  Directions directions_;
  std::map<RequestId, ParetoPoint> members_;
  std::set<RequestId> waiting_;
  mutable std::vector<RequestId> order_;  // ranking(), until a trial joins; empty: not computed
};

class HalvingSearcher : public Searcher {
 public:
  HalvingSearcher(const StudySpec& spec, Kind kind) : spec_(spec), kind_(kind) {
    Field options(spec_.searcher.options, "searcher");
    Field max_trials(spec_.searcher.options, "searcher.max_trials");  // for its path only
    if (options.has("eta")) eta_ = at_least(options["eta"], 2);
    int top = top_rung(options);
    if (kind != Kind::kHyperband) {
      if (!spec_.searcher.max_trials) max_trials.fail("missing (" + name() + " needs it)");
      brackets_.push_back({0, *spec_.searcher.max_trials, top + 1});
      if (options.has("parallel")) parallel_ = at_least(options["parallel"], 1);
      bracket_running_.assign(1, 0);
      // No trial is promoted from the top rung: it needs no index.
      if (asynchronous())
        for (int k = 0; k < top; ++k) rungs_.push_back(new_ranking());
      make_sampler();
      return;
    }
    int count = options.has("brackets") ? options["brackets"].integer(1, top + 1) : top + 1;
    int64_t iterations = options.has("iterations") ? at_least(options["iterations"], 1) : 1;
    auto bracket_size = [&](int s) {  // ceil((s_max + 1) / (s + 1) eta^s)
      return ((top + 1) * power(eta_, s) + s) / (s + 1);
    };
    int64_t per_iteration = 0;
    for (int s = top; s > top - count; --s) per_iteration += bracket_size(s);
    // The grid's limit: a typo in a spec should not make millions of trials. Checked before the
    // brackets are made, so that no `iterations` allocates in proportion to itself.
    const int64_t limit = static_cast<int64_t>(kMaxGridTrials);
    const int64_t total =
        per_iteration <= INT64_MAX / iterations ? per_iteration * iterations : INT64_MAX;
    int64_t cap = spec_.searcher.max_trials.value_or(INT64_MAX);
    if (std::min(total, cap) > limit)
      max_trials.fail(
          "hyperband's brackets have " +
          (total < INT64_MAX ? std::to_string(total) : "more than " + std::to_string(limit)) +
          " trials; give max_trials to cap them");
    RequestId next = 0;
    for (int64_t i = 0; i < iterations && next < cap; ++i)
      for (int s = top; s > top - count && next < cap; --s) {
        brackets_.push_back({next, std::min(bracket_size(s), cap - next), s + 1, i});
        next += brackets_.back().size;
      }
    bracket_running_.assign(brackets_.size(), 0);
    make_sampler();
  }

  // Made after the brackets, which say how many trials it may be asked for.
  void make_sampler() { sampler_ = scheduler_sampler(spec_, *most_trials()); }

  std::optional<uint64_t> most_trials() const override {
    return static_cast<uint64_t>(brackets_.back().first + brackets_.back().size);
  }
  bool learns() const override { return sampler_ && sampler_->learns(); }

  // asha and moasha create trials as they go: a configuration given while they run is the next
  // one they create (promotions, which are no proposals, still come first). sha and hyperband
  // draw their brackets ahead and take none.
  std::vector<Operation> enqueue(const Params& params) override {
    if (!asynchronous()) return Searcher::enqueue(params);
    if (trials_.size() + queued_.size() >= static_cast<size_t>(brackets_[0].size))
      throw std::invalid_argument("all its max_trials (" + std::to_string(brackets_[0].size) +
                                  ") trials are created or enqueued already");
    queued_.push_back(params);
    return fill();
  }

  std::vector<Operation> on_study_start() override {
    if (asynchronous()) return fill();
    std::vector<Operation> ops;
    start_brackets(0, ops);
    return creates_first(std::move(ops));
  }

  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override {
    record(trial, step, ParetoPoint{{value}, 0});
    return {};
  }

  // moasha ranks by every objective and the violation; the others by the one value they see.
  std::vector<Operation> on_evaluation(RequestId trial, int64_t step,
                                       const Evaluation& e) override {
    if (kind_ != Kind::kMoAsha) return on_validation(trial, step, e.value);
    if (e.values.size() != directions_.size())
      throw std::invalid_argument(name() + " searcher: " + std::to_string(e.values.size()) +
                                  " values for " + std::to_string(directions_.size()) +
                                  " objectives");
    record(trial, step, ParetoPoint{e.values, e.violation});
    return {};
  }

  std::vector<Operation> on_trial_closed(RequestId trial) override { return done(trial, false); }
  std::vector<Operation> on_trial_failed(RequestId trial) override { return done(trial, true); }

  json save() const override {
    json trials = json::array();
    for (const TrialState& t : trials_) {
      json values = json::array();
      for (const std::optional<ParetoPoint>& v : t.values) values.push_back(rung_value_json(v));
      trials.push_back({{"running", t.running}, {"values", values}});
      // A sampler's values depend on the study so far: they are kept (draws are made again).
      if (sampler_ || t.given) trials.back()["params"] = t.params;
    }
    json out = {{"trials", trials}};
    if (json sampler = sampler_ ? sampler_->save() : nullptr; !sampler.is_null())
      out["sampler"] = std::move(sampler);
    if (!queued_.empty()) out["queued"] = json(queued_);
    return out;
  }

  void load(const json& state) override {
    Field f(state, "state");
    f.check_keys({"trials", "sampler", "queued"});
    Field list = f["trials"];
    int64_t capacity = brackets_.back().first + brackets_.back().size;
    int64_t n = static_cast<int64_t>(list.items(0));
    if (n > capacity)
      list.fail("has " + std::to_string(n) + " trials, more than the " + std::to_string(capacity) +
                " this searcher makes");
    std::vector<TrialState> trials;
    for (RequestId id = 0; id < n; ++id) {
      Field x = list[id];
      x.check_keys({"running", "values", "params"});
      TrialState t = new_trial(id);
      if (static_cast<size_t>(id) < spec_.enqueued.size()) t.params = spec_.enqueued[id];
      if (sampler_ || x.has("params")) {
        if (!x["params"].is_object()) x["params"].fail("expected an object");
        t.params = x["params"].json();
        t.given = !sampler_;
      }
      t.running = x["running"].boolean();
      Field values = x["values"];
      size_t rungs = values.items(1);
      if (rungs > static_cast<size_t>(brackets_[t.bracket].rungs))
        values.fail("more rungs than trial " + std::to_string(id) + "'s bracket has");
      t.values.clear();
      for (size_t k = 0; k < rungs; ++k) t.values.push_back(rung_value_of(values[k]));
      trials.push_back(std::move(t));
    }
    std::deque<Params> queued;
    if (f.has("queued"))
      for (size_t i = 0, k = f["queued"].items(1); i < k; ++i) {
        if (!f["queued"][i].is_object()) f["queued"][i].fail("expected an object");
        queued.push_back(f["queued"][i].json());
      }
    if (n + static_cast<int64_t>(queued.size()) > capacity)
      f["queued"].fail("more trials than the " + std::to_string(capacity) + " this searcher makes");
    trials_ = std::move(trials);
    queued_ = std::move(queued);
    reindex();
    if (f.has("sampler") && sampler_) sampler_->load(f["sampler"]);
  }

 private:
  const std::string& name() const { return spec_.searcher.name; }
  // asha and moasha: trials start and are promoted one by one, without waiting for a rung.
  bool asynchronous() const { return kind_ == Kind::kAsha || kind_ == Kind::kMoAsha; }
  // hyperband with a model: a bracket's trials are drawn when the bracket before it has finished
  // its first rung, so that each bracket learns from the ones before (BOHB); else all at once.
  bool sequential() const { return kind_ == Kind::kHyperband && sampler_ && sampler_->learns(); }

  std::unique_ptr<RungRanking> new_ranking() const {
    if (kind_ == Kind::kMoAsha) return std::make_unique<ParetoRanking>(directions_);
    return std::make_unique<ValueRanking>(spec_.searcher.maximize);
  }

  // Earlier evaluations come again when a promoted trial is retrained: only its rung step counts.
  // A value that is not finite (a diverged trial) is none.
  void record(RequestId trial, int64_t step, ParetoPoint p) {
    TrialState& t = at(trial);
    const bool finite =
        std::all_of(p.values.begin(), p.values.end(), [](double v) { return std::isfinite(v); }) &&
        !std::isnan(p.violation);
    if (t.running && finite && step == rung_length(t, t.rung())) t.values.back() = std::move(p);
  }

  // A rung's value in the saved state: null when none; the number for asha, sha and hyperband (the
  // format their plans have always had); {"values", "violation"} for moasha.
  json rung_value_json(const std::optional<ParetoPoint>& v) const {
    if (!v) return nullptr;
    if (kind_ != Kind::kMoAsha) return v->values[0];
    json values = json::array();
    for (double x : v->values) values.push_back(json_number(x));
    return {{"values", values}, {"violation", json_number(v->violation)}};
  }
  std::optional<ParetoPoint> rung_value_of(const Field& f) const {
    if (f.json().is_null()) return std::nullopt;
    if (kind_ != Kind::kMoAsha) return ParetoPoint{{f.number()}, 0};
    f.check_keys({"values", "violation"});
    Field values = f["values"];
    if (values.items(1) != directions_.size())
      values.fail("expected " + std::to_string(directions_.size()) + " values, one by objective");
    ParetoPoint p;
    for (size_t i = 0; i < directions_.size(); ++i) p.values.push_back(values[i].number());
    std::optional<double> violation = number_of_json(f["violation"].json());
    if (!violation || !(*violation >= 0)) f["violation"].fail("expected a number >= 0 or \"inf\"");
    p.violation = *violation;
    return p;
  }

  // Validates min_length and max_length and returns the index of the longest rung: the largest k
  // with min_length * eta^k <= max_length. Every trial must have the same rungs, so the two are
  // compared in their common unit, or in steps when one batch size makes them comparable.
  int top_rung(const Field& options) {
    // Rungs are lengths common to all trials; with length.end_of each trial has its own.
    if (!spec_.one_length())
      Field(spec_.searcher.options, "searcher.name")
          .fail(name() +
                " ranks trials at common rung lengths, and with length.end_of every trial ends "
                "at its own step: give the study a fixed length");
    const bool batch_drawn = spec_.space.draws("batch_size");
    int64_t u = batch_drawn ? 0 : spec_.steps_per_epoch(Params::object());
    auto length = [&](const std::string& key) {
      Span span = parse_span(options[key]);
      const bool no_samples = spec_.data.train_samples == 0;  // an external data set
      if (span.epochs && ((!batch_drawn && u == 0) || no_samples))
        options[key]["epochs"].fail(
            "epoch units are not possible here: " +
            (no_samples
                 ? spec_.no_epochs
                 : std::string("the trials have no batch size that is constant within a trial")));
      return span;
    };
    min_ = length("min_length");
    max_ = options.has("max_length") ? length("max_length") : spec_.length;
    bool same_unit = min_.epochs == max_.epochs;
    if (!same_unit && batch_drawn)
      options["min_length"].fail(
          "give min_length and max_length in one unit: the steps of an epoch differ between "
          "trials (batch_size is drawn)");
    int64_t lo = same_unit ? min_.count : min_.steps(u);
    int64_t hi = same_unit ? max_.count : max_.steps(u);
    if (lo > hi)
      options["min_length"].fail(
          "longer than max_length" +
          std::string(options.has("max_length") ? "" : " (by default the spec's length)"));
    int top = 0;
    for (int64_t len = lo; len <= hi / eta_; len *= eta_) ++top;
    return top;
  }

  TrialState& at(RequestId trial) {
    if (trial < 0 || trial >= static_cast<RequestId>(trials_.size()))
      throw std::invalid_argument(name() + " searcher: no trial " + std::to_string(trial));
    return trials_[trial];
  }

  // Its bracket, and its values: grid points first when the space has a grid, then seeded draws
  // (as `grid` and `random` do); with a sampler, create() asks it instead.
  TrialState new_trial(RequestId id) const {
    TrialState t;
    // The last bracket that starts at or before it (by bisection: iterations make many brackets).
    auto after = std::upper_bound(brackets_.begin(), brackets_.end(), id,
                                  [](RequestId i, const Bracket& b) { return i < b.first; });
    t.bracket = static_cast<size_t>(after - brackets_.begin()) - 1;
    const SearchSpace& space = spec_.space;
    bool grid = std::any_of(space.params().begin(), space.params().end(),
                            [](const Param& p) { return p.kind == DistKind::kGrid; });
    uint64_t i = static_cast<uint64_t>(id);
    t.params =
        space.draw(spec_.seed, i, grid && i < space.grid_size() ? std::optional(i) : std::nullopt);
    return t;
  }

  // Hyperband's rungs are anchored at max_length; sha's and asha's at min_length, but their top
  // rung is max_length itself (as Ray Tune's survivors run to max_t): with min 10, max 100 and
  // eta 3 the rungs are 10, 30 and 100, not 10, 30, 90.
  int64_t rung_length(const TrialState& t, int k) const {
    int64_t u = spec_.steps_per_epoch(t.params);
    const int top = brackets_[t.bracket].rungs - 1;
    if (kind_ == Kind::kHyperband) return max_.steps(u) / power(eta_, top - k);
    return k == top ? max_.steps(u) : min_.steps(u) * power(eta_, k);
  }

  // Trains the trial to its current rung: the spec's evaluation steps below it, and the rung.
  Train train(RequestId id) const {
    const TrialState& t = trials_[id];
    int64_t length = rung_length(t, t.rung());
    std::vector<int64_t> evals = spec_.eval_steps(t.params);
    evals.erase(std::lower_bound(evals.begin(), evals.end(), length), evals.end());
    evals.push_back(length);
    return Train{id, length, std::move(evals)};
  }

  // A sampler's view of the trials: observations by BOHB's rule over the rung lengths (each trial
  // at every rung it finished with a value) and the trials in flight.
  SamplerView view() const {
    // A warm start's trials at every rung length of every bracket (for their params).
    std::map<int64_t, std::vector<SampledTrial>> by_length =
        prior_by_level(spec_, [&](const Params& params) {
          std::vector<int64_t> lengths;
          TrialState t;
          t.params = params;
          // Later iterations repeat the first one's rung lengths.
          for (t.bracket = 0; t.bracket < brackets_.size() && brackets_[t.bracket].iteration == 0;
               ++t.bracket)
            for (int k = 0; k < brackets_[t.bracket].rungs; ++k)
              lengths.push_back(rung_length(t, k));
          std::sort(lengths.begin(), lengths.end());
          lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
          return lengths;
        });
    SamplerView v;
    for (RequestId id = 0; id < static_cast<RequestId>(trials_.size()); ++id) {
      const TrialState& t = trials_[id];
      if (t.running) v.running.push_back({id, &t.params, 0});
      for (int k = 0; k <= t.rung(); ++k)
        if (t.values[k] && !(k == t.rung() && t.running))
          by_length[rung_length(t, k)].push_back({id, &t.params, t.values[k]->values[0]});
    }
    v.observed = bohb_observations(spec_, by_length);
    return v;
  }

  void create(std::vector<Operation>& ops) {
    RequestId id = static_cast<RequestId>(trials_.size());
    TrialState t = new_trial(id);
    if (static_cast<size_t>(id) < spec_.enqueued.size()) {
      t.params = spec_.enqueued[id];
    } else if (!queued_.empty()) {
      t.params = std::move(queued_.front());
      t.given = true;
      queued_.pop_front();
    } else if (sampler_) {
      t.params = sampler_->propose(static_cast<uint64_t>(id), view());
    }
    trials_.push_back(std::move(t));
    ++running_;
    ++bracket_running_[trials_.back().bracket];
    ++running_at(0);
    ops.push_back(Create{id, trials_.back().params, std::nullopt});
    ops.push_back(train(id));
  }

  void promote(RequestId id, std::vector<Operation>& ops) {
    TrialState& t = trials_[id];
    if (static_cast<size_t>(t.rung()) < rungs_.size())
      rungs_[t.rung()]->promote(id, *t.values.back());
    t.values.emplace_back();
    t.running = true;
    ++running_;
    ++bracket_running_[t.bracket];
    ++running_at(t.rung());
    ops.push_back(train(id));
  }

  // asha, moasha: the trial stopped running at its rung with a value there: it joins the rung's
  // ranking. (While it runs, its value may still change; a failure resets it.)
  void rank_at_rung(RequestId id) {
    const TrialState& t = trials_[id];
    if (static_cast<size_t>(t.rung()) >= rungs_.size() || !t.values.back()) return;
    rungs_[t.rung()]->add(id, *t.values.back());
  }

  // Rebuilds the counts and indexes from trials_ (after load), by their definitions: a trial is
  // in rung k's ranking when it has a value there and no longer runs there (see ranked()).
  void reindex() {
    running_ = 0;
    bracket_running_.assign(brackets_.size(), 0);
    running_at_.clear();
    for (std::unique_ptr<RungRanking>& r : rungs_) r = new_ranking();
    for (RequestId id = 0; id < static_cast<RequestId>(trials_.size()); ++id) {
      const TrialState& t = trials_[id];
      if (t.running) {
        ++running_;
        ++bracket_running_[t.bracket];
        ++running_at(t.rung());
      }
      for (int k = 0; k <= t.rung() && static_cast<size_t>(k) < rungs_.size(); ++k) {
        if (!t.values[k] || (k == t.rung() && t.running)) continue;
        rungs_[k]->add(id, *t.values[k]);
        if (k < t.rung()) rungs_[k]->promote(id, *t.values[k]);
      }
    }
    // The rungs settled before the state was saved had their trials stopped then.
    settled_ = 0;
    while (settled(settled_)) ++settled_;
  }

  // The master applies operations in order, and a Train whose steps are already trained and
  // evaluated (shared with another study) reports back at once, before the rest are applied:
  // creating every new trial first keeps trial ids in creation order even then.
  static std::vector<Operation> creates_first(std::vector<Operation> ops) {
    std::stable_partition(ops.begin(), ops.end(),
                          [](const Operation& op) { return std::holds_alternative<Create>(op); });
    return ops;
  }

  std::vector<Operation> done(RequestId trial, bool failed) {
    TrialState& t = at(trial);
    if (!t.running) return {};  // stopped, or closed already
    t.running = false;
    --running_;
    --bracket_running_[t.bracket];
    --running_at(t.rung());
    if (failed) t.values.back().reset();
    rank_at_rung(trial);
    std::vector<Operation> ops = asynchronous() ? fill() : halve(t.bracket);
    // asha, moasha: the trials of a rung that has settled stay below max_length: stopped there.
    for (; settled(settled_); ++settled_)
      for (RequestId id : rungs_[settled_]->waiting()) ops.push_back(Stop{id});
    if (running_ == 0) ops.push_back(Finish{});
    return ops;
  }

  // asha, moasha: rung k (below the top) has settled when no trial can join it any more and none
  // of it can be promoted: every trial is created, none runs to rung k or below, the rungs below
  // have settled, and none of rung k's waiting trials is among the first floor(count / eta) of
  // its ranking. Nothing changes a settled rung again, so its waiting trials are stopped there.
  // Rungs settle in order, from 0; at the study's end (nothing in flight) all have.
  bool settled(size_t k) {
    if (k >= rungs_.size() || static_cast<int64_t>(trials_.size()) < brackets_[0].size)
      return false;
    return running_at(static_cast<int>(k)) == 0 && !rungs_[k]->promotable(eta_);
  }
  int64_t& running_at(int rung) {
    if (static_cast<size_t>(rung) >= running_at_.size()) running_at_.resize(rung + 1, 0);
    return running_at_[rung];
  }

  // The trials among [first, last) that finished rung k with a value, best first (sha and
  // hyperband, once per rung of a bracket; asha keeps the same order in its RungRanking).
  std::vector<RequestId> ranked(RequestId first, RequestId last, int k) const {
    std::vector<RequestId> ids;
    for (RequestId id = first; id < last; ++id) {
      const TrialState& t = trials_[id];
      if (t.rung() >= k && t.values[k] && !(t.rung() == k && t.running)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [&](RequestId a, RequestId b) {
      double va = trials_[a].values[k]->values[0], vb = trials_[b].values[k]->values[0];
      if (va != vb) return spec_.searcher.maximize ? va > vb : va < vb;
      return a < b;
    });
    return ids;
  }

  // Creates the trials of the brackets that start together from bracket b on: b alone when
  // sequential(), else every bracket of b's iteration.
  void start_brackets(size_t b, std::vector<Operation>& ops) {
    for (size_t c = b; c < brackets_.size(); ++c) {
      if (c > b && (sequential() || brackets_[c].iteration != brackets_[b].iteration)) break;
      for (int64_t i = 0; i < brackets_[c].size; ++i) create(ops);
    }
  }

  // Bracket `bracket` has finished its first rung: the brackets after it that have not started,
  // if any, may start now. With a model (sequential()), the next one does. Without, the next
  // iteration's do once every bracket of this iteration has finished its first rung: the
  // iteration's later rungs still keep workers busy while they train, and only one iteration's
  // trials at a time wait for their first rung, never iterations * brackets of them up front.
  void start_next(size_t bracket, std::vector<Operation>& ops) {
    const RequestId created = static_cast<RequestId>(trials_.size());
    size_t next = bracket + 1;  // the first bracket not started: brackets start in order
    while (next < brackets_.size() && brackets_[next].first < created) ++next;
    if (next == brackets_.size()) return;
    if (sequential()) {
      if (next == bracket + 1) start_brackets(next, ops);
      return;
    }
    // No trial of this iteration (they precede the next one's) is still training to rung 0.
    const int64_t iteration = brackets_[bracket].iteration;
    for (RequestId id = created; id-- > 0 && brackets_[trials_[id].bracket].iteration == iteration;)
      if (trials_[id].running && trials_[id].rung() == 0) return;
    start_brackets(next, ops);
  }

  // sha, hyperband: once no trial of the bracket is running, the best of its current rung go on.
  std::vector<Operation> halve(size_t bracket) {
    if (bracket_running_[bracket] > 0) return {};
    // The bracket is complete: this happens once per rung, so scanning it is fine.
    const Bracket& b = brackets_[bracket];
    RequestId last = b.first + b.size;
    int k = 0;
    for (RequestId id = b.first; id < last; ++id) k = std::max(k, trials_[id].rung());
    std::vector<Operation> ops;
    if (k == 0) start_next(bracket, ops);
    if (k + 1 == b.rungs) return creates_first(std::move(ops));
    std::vector<RequestId> ids = ranked(b.first, last, k);
    size_t keep = std::max<size_t>(1, ids.size() / eta_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i < keep)
        promote(ids[i], ops);
      else
        ops.push_back(Stop{ids[i]});
    }
    return creates_first(std::move(ops));
  }

  // asha, moasha: keeps `parallel` trials in flight, promoting where it can, else creating.
  std::vector<Operation> fill() {
    std::vector<Operation> ops;
    for (int64_t running = running_; running < parallel_; ++running) {
      if (std::optional<RequestId> id = promotable())
        promote(*id, ops);
      else if (static_cast<int64_t>(trials_.size()) < brackets_[0].size)
        create(ops);
      else
        break;
    }
    return creates_first(std::move(ops));
  }

  // From the highest rung down, the best trial not promoted yet among the first floor(count / eta)
  // of a rung's count values.
  std::optional<RequestId> promotable() const {
    for (size_t k = rungs_.size(); k-- > 0;)
      if (std::optional<RequestId> id = rungs_[k]->promotable(eta_)) return id;
    return std::nullopt;
  }

  StudySpec spec_;
  Kind kind_;
  Directions directions_ = spec_.searcher.goals.directions();
  int64_t eta_ = 3;
  Span min_, max_;
  int64_t parallel_ = 2;  // asha, moasha
  std::vector<Bracket> brackets_;
  std::vector<TrialState> trials_;  // by id
  // Kept with trials_ so that no event counts or sorts every trial.
  int64_t running_ = 0;                   // trials running, in all brackets
  std::vector<int64_t> bracket_running_;  // by bracket
  // asha, moasha: rungs 0 .. top - 1; empty for sha, hyperband.
  std::vector<std::unique_ptr<RungRanking>> rungs_;
  std::vector<int64_t> running_at_;  // trials running, by the rung they are trained to
  size_t settled_ = 0;               // asha, moasha: rungs 0 .. settled_ - 1 have settled
  // `searcher.sampler`: where new trials' values come from; none: grid points, then draws.
  std::unique_ptr<Sampler> sampler_;
  std::deque<Params> queued_;  // asha, moasha: enqueued while running, not created yet
};

SearcherKind halving_kind(Kind kind, std::vector<std::string> extra) {
  std::vector<std::string> options = {"eta", "min_length", "max_length"};
  options.insert(options.end(), extra.begin(), extra.end());
  return {options,
          [kind](const StudySpec& s) { return std::make_unique<HalvingSearcher>(s, kind); },
          kind == Kind::kMoAsha, true};
}

}  // namespace

SearcherKind sha_searcher_kind() {
  return halving_kind(Kind::kSha, {"sampler"});
}
SearcherKind asha_searcher_kind() {
  return halving_kind(Kind::kAsha, {"parallel", "sampler"});
}
SearcherKind moasha_searcher_kind() {
  return halving_kind(Kind::kMoAsha, {"parallel"});
}
SearcherKind hyperband_searcher_kind() {
  return halving_kind(Kind::kHyperband, {"brackets", "iterations", "sampler"});
}

}  // namespace hippo
