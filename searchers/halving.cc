#include "searchers/halving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "searchers/basic.h"

namespace hippo {
namespace {

using nlohmann::json;

enum class Kind { kSha, kAsha, kHyperband };

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
};

struct TrialState {
  size_t bracket = 0;
  Params params;
  bool running = true;  // being trained to its current rung: neither closed nor failed yet
  // The value at each rung it reached; the last one is at its current rung (none until reported).
  std::vector<std::optional<double>> values{std::nullopt};

  int rung() const { return static_cast<int>(values.size()) - 1; }
};

// A trial's place in a rung's ranking: its value there (negated when the mode is max) and its id,
// so that pairs in their natural order are best first, ties to the lower id.
using RankKey = std::pair<double, RequestId>;
// A set of keys that also tells how many keys come before one, in O(log n).
using RankTree =
    __gnu_pbds::tree<RankKey, __gnu_pbds::null_type, std::less<RankKey>, __gnu_pbds::rb_tree_tag,
                     __gnu_pbds::tree_order_statistics_node_update>;

// asha's view of one rung, kept up to date so that an event costs O(rungs log n), not a sort of
// every trial: with a study of 100,000 trials, re-ranking on each event would be quadratic.
struct RungIndex {
  // The trials that finished the rung with a value, promoted since or not: the rung's ranking.
  RankTree ranked;
  // Those of them still at the rung (not promoted), in the same order.
  std::set<RankKey> waiting;
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
      if (kind == Kind::kAsha) rungs_.resize(top);
      return;
    }
    int count = options.has("brackets") ? options["brackets"].integer(1, top + 1) : top + 1;
    int64_t cap = spec_.searcher.max_trials.value_or(INT64_MAX);
    RequestId next = 0;
    for (int s = top; s > top - count && next < cap; --s) {
      int64_t n = ((top + 1) * power(eta_, s) + s) / (s + 1);  // ceil((s_max + 1) / (s + 1) eta^s)
      brackets_.push_back({next, std::min(n, cap - next), s + 1});
      next += brackets_.back().size;
    }
    // The grid's limit: a typo in a spec should not make millions of trials.
    if (next > static_cast<int64_t>(kMaxGridTrials))
      max_trials.fail("hyperband's brackets have " + std::to_string(next) +
                      " trials; give max_trials to cap them");
    bracket_running_.assign(brackets_.size(), 0);
  }

  std::optional<uint64_t> most_trials() const override {
    return static_cast<uint64_t>(brackets_.back().first + brackets_.back().size);
  }

  std::vector<Operation> on_study_start() override {
    if (kind_ == Kind::kAsha) return fill();
    std::vector<Operation> ops;
    for (const Bracket& b : brackets_)
      for (int64_t i = 0; i < b.size; ++i) create(ops);
    return creates_first(std::move(ops));
  }

  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override {
    TrialState& t = at(trial);
    // Earlier evaluations come again when a promoted trial is retrained: only its rung step counts.
    if (t.running && std::isfinite(value) && step == rung_length(t, t.rung()))
      t.values.back() = value;
    return {};
  }

  std::vector<Operation> on_trial_closed(RequestId trial) override { return done(trial, false); }
  std::vector<Operation> on_trial_failed(RequestId trial) override { return done(trial, true); }

  json save() const override {
    json trials = json::array();
    for (const TrialState& t : trials_) {
      json values = json::array();
      for (const std::optional<double>& v : t.values) values.push_back(v ? json(*v) : json());
      trials.push_back({{"running", t.running}, {"values", values}});
    }
    return {{"trials", trials}};
  }

  void load(const json& state) override {
    Field f(state, "state");
    f.check_keys({"trials"});
    Field list = f["trials"];
    int64_t capacity = brackets_.back().first + brackets_.back().size;
    int64_t n = static_cast<int64_t>(list.items(0));
    if (n > capacity)
      list.fail("has " + std::to_string(n) + " trials, more than the " + std::to_string(capacity) +
                " this searcher makes");
    std::vector<TrialState> trials;
    for (RequestId id = 0; id < n; ++id) {
      Field x = list[id];
      x.check_keys({"running", "values"});
      TrialState t = new_trial(id);
      t.running = x["running"].boolean();
      Field values = x["values"];
      size_t rungs = values.items(1);
      if (rungs > static_cast<size_t>(brackets_[t.bracket].rungs))
        values.fail("more rungs than trial " + std::to_string(id) + "'s bracket has");
      t.values.clear();
      for (size_t k = 0; k < rungs; ++k)
        t.values.push_back(values[k].json().is_null() ? std::nullopt
                                                      : std::optional(values[k].number()));
      trials.push_back(std::move(t));
    }
    trials_ = std::move(trials);
    reindex();
  }

 private:
  const std::string& name() const { return spec_.searcher.name; }

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

  // Grid points first when the space has a grid, then seeded draws (as `grid` and `random` do).
  TrialState new_trial(RequestId id) const {
    TrialState t;
    while (id >= brackets_[t.bracket].first + brackets_[t.bracket].size) ++t.bracket;
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

  void create(std::vector<Operation>& ops) {
    RequestId id = static_cast<RequestId>(trials_.size());
    trials_.push_back(new_trial(id));
    ++running_;
    ++bracket_running_[trials_.back().bracket];
    ops.push_back(Create{id, trials_.back().params, std::nullopt});
    ops.push_back(train(id));
  }

  void promote(RequestId id, std::vector<Operation>& ops) {
    TrialState& t = trials_[id];
    // It stays in its rung's ranking (its value there counts for the others), but waits no more.
    if (static_cast<size_t>(t.rung()) < rungs_.size())
      rungs_[t.rung()].waiting.erase(rank_key(id, t.rung()));
    t.values.emplace_back();
    t.running = true;
    ++running_;
    ++bracket_running_[t.bracket];
    ops.push_back(train(id));
  }

  RankKey rank_key(RequestId id, int k) const {
    double v = *trials_[id].values[k];
    return {spec_.searcher.maximize ? -v : v, id};
  }

  // asha: the trial stopped running at its rung with a value there: it joins the rung's ranking.
  // (While it runs, its value may still change; a failure resets it.)
  void rank_at_rung(RequestId id) {
    const TrialState& t = trials_[id];
    if (static_cast<size_t>(t.rung()) >= rungs_.size() || !t.values.back()) return;
    RankKey key = rank_key(id, t.rung());
    rungs_[t.rung()].ranked.insert(key);
    rungs_[t.rung()].waiting.insert(key);
  }

  // Rebuilds the counts and indexes from trials_ (after load), by their definitions: a trial is
  // in rung k's ranking when it has a value there and no longer runs there (see ranked()).
  void reindex() {
    running_ = 0;
    bracket_running_.assign(brackets_.size(), 0);
    for (RungIndex& r : rungs_) r = RungIndex{};
    for (RequestId id = 0; id < static_cast<RequestId>(trials_.size()); ++id) {
      const TrialState& t = trials_[id];
      if (t.running) {
        ++running_;
        ++bracket_running_[t.bracket];
      }
      for (int k = 0; k <= t.rung() && static_cast<size_t>(k) < rungs_.size(); ++k) {
        if (!t.values[k] || (k == t.rung() && t.running)) continue;
        rungs_[k].ranked.insert(rank_key(id, k));
        if (k == t.rung()) rungs_[k].waiting.insert(rank_key(id, k));
      }
    }
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
    if (failed) t.values.back().reset();
    rank_at_rung(trial);
    std::vector<Operation> ops = kind_ == Kind::kAsha ? fill() : halve(t.bracket);
    if (running_ == 0) ops.push_back(Finish{});
    return ops;
  }

  // The trials among [first, last) that finished rung k with a value, best first (sha and
  // hyperband, once per rung of a bracket; asha keeps the same order in rungs_).
  std::vector<RequestId> ranked(RequestId first, RequestId last, int k) const {
    std::vector<RequestId> ids;
    for (RequestId id = first; id < last; ++id) {
      const TrialState& t = trials_[id];
      if (t.rung() >= k && t.values[k] && !(t.rung() == k && t.running)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [&](RequestId a, RequestId b) {
      double va = *trials_[a].values[k], vb = *trials_[b].values[k];
      if (va != vb) return spec_.searcher.maximize ? va > vb : va < vb;
      return a < b;
    });
    return ids;
  }

  // sha, hyperband: once no trial of the bracket is running, the best of its current rung go on.
  std::vector<Operation> halve(size_t bracket) {
    if (bracket_running_[bracket] > 0) return {};
    // The bracket is complete: this happens once per rung, so scanning it is fine.
    const Bracket& b = brackets_[bracket];
    RequestId last = b.first + b.size;
    int k = 0;
    for (RequestId id = b.first; id < last; ++id) k = std::max(k, trials_[id].rung());
    if (k + 1 == b.rungs) return {};
    std::vector<RequestId> ids = ranked(b.first, last, k);
    size_t keep = std::max<size_t>(1, ids.size() / eta_);
    std::vector<Operation> ops;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i < keep)
        promote(ids[i], ops);
      else
        ops.push_back(Stop{ids[i]});
    }
    return ops;
  }

  // asha: keeps `parallel` trials in flight, promoting where it can, else creating.
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
  // of a rung's count values. That is the first waiting trial of the rung if its rank is below
  // floor(count / eta): every trial ranked before it has been promoted already.
  std::optional<RequestId> promotable() const {
    for (size_t k = rungs_.size(); k-- > 0;) {
      const RungIndex& r = rungs_[k];
      if (r.waiting.empty()) continue;
      const RankKey& best = *r.waiting.begin();
      if (r.ranked.order_of_key(best) < r.ranked.size() / static_cast<size_t>(eta_))
        return best.second;
    }
    return std::nullopt;
  }

  StudySpec spec_;
  Kind kind_;
  int64_t eta_ = 3;
  Span min_, max_;
  int64_t parallel_ = 2;  // asha
  std::vector<Bracket> brackets_;
  std::vector<TrialState> trials_;  // by id
  // Kept with trials_ so that no event counts or sorts every trial.
  int64_t running_ = 0;                   // trials running, in all brackets
  std::vector<int64_t> bracket_running_;  // by bracket
  std::vector<RungIndex> rungs_;          // asha: rungs 0 .. top - 1; empty for sha, hyperband
};

SearcherKind halving_kind(Kind kind, std::vector<std::string> extra) {
  std::vector<std::string> options = {"eta", "min_length", "max_length"};
  options.insert(options.end(), extra.begin(), extra.end());
  return {options,
          [kind](const StudySpec& s) { return std::make_unique<HalvingSearcher>(s, kind); }};
}

}  // namespace

SearcherKind sha_searcher_kind() {
  return halving_kind(Kind::kSha, {});
}
SearcherKind asha_searcher_kind() {
  return halving_kind(Kind::kAsha, {"parallel"});
}
SearcherKind hyperband_searcher_kind() {
  return halving_kind(Kind::kHyperband, {"brackets"});
}

}  // namespace hippo
