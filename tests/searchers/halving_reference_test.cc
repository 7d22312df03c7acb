// The halving family (sha, asha, hyperband) keeps counts and per-rung rankings so that an event
// costs O(rungs log n) instead of a pass (and a sort) over every trial. These tests hold it to
// the straightforward algorithm it replaced, kept here as a reference: the same operations for
// long random event sequences, the same saved state, and the same after save/load mid-study; and
// they time a study of 100,000 asha trials.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "tests/searchers/random_master.h"

namespace hippo {
namespace {

using nlohmann::json;
using testing::describe;
using testing::RandomMaster;

// A study's searcher settings; lengths in steps (the spec's length is 108, evaluations every 10).
struct Config {
  std::string name;  // sha, asha or hyperband
  int64_t eta = 3;
  int64_t min_steps = 4;
  int64_t max_steps = 108;
  std::optional<int64_t> max_trials;
  int64_t parallel = 2;    // asha
  int brackets = 0;        // hyperband; 0: all
  int64_t iterations = 1;  // hyperband
  bool maximize = true;
};

StudySpec make_spec(const Config& c) {
  json searcher = {{"name", c.name},
                   {"metric", c.maximize ? "accuracy" : "loss"},
                   {"mode", c.maximize ? "max" : "min"},
                   {"eta", c.eta},
                   {"min_length", {{"steps", c.min_steps}}},
                   {"max_length", {{"steps", c.max_steps}}}};
  if (c.max_trials) searcher["max_trials"] = *c.max_trials;
  if (c.name == "asha") searcher["parallel"] = c.parallel;
  if (c.name == "hyperband" && c.brackets > 0) searcher["brackets"] = c.brackets;
  if (c.name == "hyperband" && c.iterations > 1) searcher["iterations"] = c.iterations;
  return parse_spec({{"name", "halving"},
                     {"model", {{"type", "mlp"}, {"hidden", {8}}}},
                     {"data", {{"name", "fashion-mnist"}, {"train_samples", 1024}}},
                     {"fixed", {{"batch_size", 32}, {"optimizer", "sgd"}}},
                     {"hyperparameters", {{"lr", {{"loguniform", {0.001, 0.1}}}}}},
                     {"searcher", searcher},
                     {"length", {{"steps", 108}}},
                     {"eval", {{"every", {{"steps", 10}}}}}});
}

int64_t power(int64_t base, int exponent) {
  int64_t p = 1;
  for (int i = 0; i < exponent; ++i) p *= base;
  return p;
}

// The algorithm as it was before the indexes, on plain vectors: every event counts the running
// trials and ranks the trials of a rung afresh. Only the option parsing is left out (Config
// gives the values); the space has no grid, so trials are seeded draws.
class Reference {
 public:
  Reference(const Config& c, const StudySpec& spec) : c_(c), spec_(spec) {
    int top = 0;
    for (int64_t len = c.min_steps; len <= c.max_steps / c.eta; len *= c.eta) ++top;
    if (c.name != "hyperband") {
      brackets_.push_back({0, *c.max_trials, top + 1});
      return;
    }
    int count = c.brackets > 0 ? c.brackets : top + 1;
    int64_t cap = c.max_trials.value_or(INT64_MAX);
    RequestId next = 0;
    for (int64_t i = 0; i < c.iterations && next < cap; ++i)
      for (int s = top; s > top - count && next < cap; --s) {
        int64_t n = ((top + 1) * power(c.eta, s) + s) / (s + 1);
        brackets_.push_back({next, std::min(n, cap - next), s + 1, i});
        next += brackets_.back().size;
      }
  }

  std::vector<Operation> on_study_start() {
    if (c_.name == "asha") return fill();
    std::vector<Operation> ops;
    start_iteration(0, ops);
    return creates_first(std::move(ops));
  }

  std::vector<Operation> on_validation(RequestId id, int64_t step, double value) {
    Trial& t = trials_.at(id);
    if (t.running && std::isfinite(value) && step == rung_length(t, t.rung()))
      t.values.back() = value;
    return {};
  }

  std::vector<Operation> done(RequestId id, bool failed) {
    Trial& t = trials_.at(id);
    if (!t.running) return {};
    t.running = false;
    if (failed) t.values.back().reset();
    std::vector<Operation> ops = c_.name == "asha" ? fill() : halve(t.bracket);
    // Hyperband: the next iteration once no trial of the last one started trains to rung 0.
    if (c_.name == "hyperband" && trials_.size() < total() &&
        std::none_of(trials_.begin(), trials_.end(), [&](const Trial& x) {
          return x.running && x.rung() == 0 &&
                 brackets_[x.bracket].iteration == brackets_[trials_.back().bracket].iteration;
        })) {
      std::vector<Operation> started;
      start_iteration(brackets_[trials_.back().bracket].iteration + 1, started);
      ops.insert(ops.begin(), started.begin(), started.end());
      ops = creates_first(std::move(ops));
    }
    if (c_.name == "asha")
      for (; settled(settled_); ++settled_)
        for (RequestId waiting : ranked(0, static_cast<RequestId>(trials_.size()), settled_))
          if (trials_[waiting].rung() == settled_) ops.push_back(Stop{waiting});
    if (std::none_of(trials_.begin(), trials_.end(), [](const Trial& x) { return x.running; }))
      ops.push_back(Finish{});
    return ops;
  }

  // The saved state's format: plans on disk hold it.
  json save() const {
    json trials = json::array();
    for (const Trial& t : trials_) {
      json values = json::array();
      for (const std::optional<double>& v : t.values) values.push_back(v ? json(*v) : json());
      trials.push_back({{"running", t.running}, {"values", values}});
    }
    return {{"trials", trials}};
  }

 private:
  struct Bracket {
    RequestId first = 0;
    int64_t size = 0;
    int rungs = 0;
    int64_t iteration = 0;
  };

  size_t total() const {
    return static_cast<size_t>(brackets_.back().first + brackets_.back().size);
  }
  void start_iteration(int64_t iteration, std::vector<Operation>& ops) {
    for (const Bracket& b : brackets_)
      if (b.iteration == iteration)
        for (int64_t i = 0; i < b.size; ++i) create(ops);
  }
  struct Trial {
    size_t bracket = 0;
    bool running = true;
    std::vector<std::optional<double>> values{std::nullopt};
    int rung() const { return static_cast<int>(values.size()) - 1; }
  };

  // Hyperband: max_length * eta^-(top - k); sha and asha: min_length * eta^k, the top at
  // max_length.
  int64_t rung_length(const Trial& t, int k) const {
    const int top = brackets_[t.bracket].rungs - 1;
    if (c_.name == "hyperband") return c_.max_steps / power(c_.eta, top - k);
    return k == top ? c_.max_steps : c_.min_steps * power(c_.eta, k);
  }

  Train train(RequestId id) const {
    int64_t length = rung_length(trials_[id], trials_[id].rung());
    std::vector<int64_t> evals = spec_.eval_steps(params(id));
    evals.erase(std::lower_bound(evals.begin(), evals.end(), length), evals.end());
    evals.push_back(length);
    return Train{id, length, evals};
  }

  Params params(RequestId id) const {
    return spec_.space.draw(spec_.seed, static_cast<uint64_t>(id), std::nullopt);
  }

  void create(std::vector<Operation>& ops) {
    RequestId id = static_cast<RequestId>(trials_.size());
    Trial t;
    while (id >= brackets_[t.bracket].first + brackets_[t.bracket].size) ++t.bracket;
    trials_.push_back(t);
    ops.push_back(Create{id, params(id), std::nullopt});
    ops.push_back(train(id));
  }

  void promote(RequestId id, std::vector<Operation>& ops) {
    trials_[id].values.emplace_back();
    trials_[id].running = true;
    ops.push_back(train(id));
  }

  static std::vector<Operation> creates_first(std::vector<Operation> ops) {
    std::stable_partition(ops.begin(), ops.end(),
                          [](const Operation& op) { return std::holds_alternative<Create>(op); });
    return ops;
  }

  std::vector<RequestId> ranked(RequestId first, RequestId last, int k) const {
    std::vector<RequestId> ids;
    for (RequestId id = first; id < last; ++id) {
      const Trial& t = trials_[id];
      if (t.rung() >= k && t.values[k] && !(t.rung() == k && t.running)) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [&](RequestId a, RequestId b) {
      double va = *trials_[a].values[k], vb = *trials_[b].values[k];
      if (va != vb) return c_.maximize ? va > vb : va < vb;
      return a < b;
    });
    return ids;
  }

  std::vector<Operation> halve(size_t bracket) {
    const Bracket& b = brackets_[bracket];
    RequestId last = b.first + b.size;
    int k = 0;
    for (RequestId id = b.first; id < last; ++id) {
      if (trials_[id].running) return {};
      k = std::max(k, trials_[id].rung());
    }
    if (k + 1 == b.rungs) return {};
    std::vector<RequestId> ids = ranked(b.first, last, k);
    size_t keep = std::max<size_t>(1, ids.size() / c_.eta);
    std::vector<Operation> ops;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i < keep)
        promote(ids[i], ops);
      else
        ops.push_back(Stop{ids[i]});
    }
    return ops;
  }

  std::vector<Operation> fill() {
    std::vector<Operation> ops;
    int64_t running =
        std::count_if(trials_.begin(), trials_.end(), [](const Trial& t) { return t.running; });
    for (; running < c_.parallel; ++running) {
      if (std::optional<RequestId> id = promotable())
        promote(*id, ops);
      else if (static_cast<int64_t>(trials_.size()) < brackets_[0].size)
        create(ops);
      else
        break;
    }
    return creates_first(std::move(ops));
  }

  std::optional<RequestId> promotable() const {
    for (int k = brackets_[0].rungs - 2; k >= 0; --k)
      if (std::optional<RequestId> id = promotable_at(k)) return id;
    return std::nullopt;
  }
  std::optional<RequestId> promotable_at(int k) const {
    std::vector<RequestId> ids = ranked(0, static_cast<RequestId>(trials_.size()), k);
    for (size_t i = 0; i < ids.size() / c_.eta; ++i)
      if (trials_[ids[i]].rung() == k) return ids[i];
    return std::nullopt;
  }

  // Rung k below the top has settled: every trial created, none running to rung k (the rungs
  // below settled first), none of it promotable.
  bool settled(int k) const {
    if (k >= brackets_[0].rungs - 1 || static_cast<int64_t>(trials_.size()) < brackets_[0].size)
      return false;
    for (const Trial& t : trials_)
      if (t.running && t.rung() == k) return false;
    return !promotable_at(k);
  }

  Config c_;
  const StudySpec& spec_;
  std::vector<Bracket> brackets_;
  std::vector<Trial> trials_;
  int settled_ = 0;  // asha: rungs 0 .. settled_ - 1 have settled (their waiting trials stopped)
};

// A random configuration of the searcher `name`: eta 2 to 4, one to seven rungs, either mode.
Config random_config(const std::string& name, std::mt19937_64& rng) {
  Config c;
  c.name = name;
  c.eta = 2 + static_cast<int64_t>(rng() % 3);
  const int64_t mins[] = {1, 4, 5, 12, 40, 108};
  c.min_steps = mins[rng() % 6];
  c.maximize = rng() % 2 == 0;
  if (name == "sha") c.max_trials = 1 + static_cast<int64_t>(rng() % 80);
  if (name == "asha") {
    c.max_trials = 1 + static_cast<int64_t>(rng() % 250);
    const int64_t parallels[] = {1, 2, 3, 5, 16, 64};
    c.parallel = parallels[rng() % 6];
  }
  if (name == "hyperband") {
    if (rng() % 3 == 0) c.max_trials = 1 + static_cast<int64_t>(rng() % 150);
    int top = 0;
    for (int64_t len = c.min_steps; len <= c.max_steps / c.eta; len *= c.eta) ++top;
    if (rng() % 2 == 0) c.brackets = 1 + static_cast<int>(rng() % (top + 1));
    if (rng() % 2 == 0) c.iterations = 1 + static_cast<int64_t>(rng() % 4);
  }
  return c;
}

// Drives the searcher and the reference with one random event sequence to the end, comparing
// every event's operations and, now and then, the saved state; at up to `reloads` random events
// the searcher is replaced by a fresh one loaded from its saved state.
struct Driven {
  int64_t events = 0;
  int reloads = 0;
};
Driven drive_and_compare(const Config& c, uint64_t seed, int reloads) {
  StudySpec spec = make_spec(c);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Reference ref(c, spec);
  RandomMaster master(seed);
  std::mt19937_64 rng(seed ^ 0x5eed);

  std::vector<Operation> ops = s->on_study_start();
  EXPECT_EQ(describe(ops), describe(ref.on_study_start()));
  master.take(ops);
  Driven d;
  while (!master.finished() && !master.idle() && !::testing::Test::HasFailure()) {
    if (d.reloads < reloads && rng() % 40 == 0) {
      ++d.reloads;
      json saved = s->save();
      EXPECT_EQ(saved.dump(), ref.save().dump()) << "after " << d.events << " events";
      s = make_searcher(spec);
      s->load(json::parse(saved.dump()));  // through text, as the search plan keeps it
      EXPECT_EQ(s->save().dump(), saved.dump());
    }
    RandomMaster::Event e = master.next();
    ++d.events;
    std::vector<Operation> want;
    switch (e.kind) {
      case RandomMaster::Event::kValidation:
        ops = s->on_validation(e.trial, e.step, e.value);
        want = ref.on_validation(e.trial, e.step, e.value);
        break;
      case RandomMaster::Event::kClosed:
        ops = s->on_trial_closed(e.trial);
        want = ref.done(e.trial, false);
        break;
      case RandomMaster::Event::kFailed:
        ops = s->on_trial_failed(e.trial);
        want = ref.done(e.trial, true);
        break;
      case RandomMaster::Event::kNextBatch:
        ops = s->next_batch();
        break;
    }
    EXPECT_EQ(describe(ops), describe(want))
        << "event " << d.events << " (kind " << e.kind << ", trial " << e.trial << ")";
    master.take(ops);
  }
  EXPECT_TRUE(master.finished());
  EXPECT_EQ(s->save().dump(), ref.save().dump());
  return d;
}

void compare_many(const std::string& name, int sequences, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Driven all;
  for (int i = 0; i < sequences && !::testing::Test::HasFailure(); ++i) {
    Config c = random_config(name, rng);
    SCOPED_TRACE(name + " sequence " + std::to_string(i) + ": eta " + std::to_string(c.eta) +
                 ", min " + std::to_string(c.min_steps) + ", max_trials " +
                 std::to_string(c.max_trials.value_or(-1)) + ", parallel " +
                 std::to_string(c.parallel) + ", brackets " + std::to_string(c.brackets) +
                 ", iterations " + std::to_string(c.iterations) + (c.maximize ? ", max" : ", min"));
    Driven d = drive_and_compare(c, rng(), i % 2 == 0 ? 0 : 3);
    all.events += d.events;
    all.reloads += d.reloads;
  }
  std::cout << name << ": " << sequences << " sequences, " << all.events << " events, "
            << all.reloads << " reloads\n";
}

TEST(HalvingReference, ShaMatchesTheSortingAlgorithm) {
  compare_many("sha", 300, 1);
}
TEST(HalvingReference, AshaMatchesTheSortingAlgorithm) {
  compare_many("asha", 300, 2);
}
TEST(HalvingReference, HyperbandMatchesTheSortingAlgorithm) {
  compare_many("hyperband", 300, 3);
}

// 100,000 asha trials, 1,000 in flight, eta 3, rungs of 4, 12, 36 and 108 steps: each Train is
// validated at its rung and closed, in a random order. Sorting every rung on each event made this
// quadratic (hours); with the indexes it takes a second or so, more under the sanitizers.
TEST(HalvingReference, AshaWithManyTrialsIsFast) {
#ifdef HIPPO_SANITIZED
  const int64_t trials = 20000;
#else
  const int64_t trials = 100000;
#endif
  Config c{.name = "asha", .max_trials = trials, .parallel = 1000};
  std::unique_ptr<Searcher> s = make_searcher(make_spec(c));
  std::mt19937_64 rng(7);
  std::vector<Train> flight;
  int64_t created = 0, promoted = 0;
  bool finished = false;
  auto take = [&](const std::vector<Operation>& ops) {
    for (const Operation& op : ops) {
      if (std::holds_alternative<Create>(op)) ++created;
      if (const Train* t = std::get_if<Train>(&op)) {
        flight.push_back(*t);
        if (t->length > 4) ++promoted;
      }
      if (const Stop* st = std::get_if<Stop>(&op))
        std::erase_if(flight, [&](const Train& t) { return t.trial == st->trial; });
      if (std::holds_alternative<Finish>(op)) finished = true;
    }
  };

  auto start = std::chrono::steady_clock::now();
  take(s->on_study_start());
  while (!flight.empty() && !finished) {
    ASSERT_LE(flight.size(), 1000u);
    size_t i = rng() % flight.size();
    Train t = flight[i];
    flight[i] = flight.back();
    flight.pop_back();
    take(s->on_validation(t.trial, t.length, std::uniform_real_distribution<double>()(rng)));
    take(s->on_trial_closed(t.trial));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
  std::cout << trials << " asha trials, " << promoted << " promotions: " << seconds << " s\n";
  EXPECT_TRUE(finished);
  EXPECT_TRUE(flight.empty());
  EXPECT_EQ(created, trials);
  // At least a third of each rung goes on (more: early trials are promoted against few others).
  EXPECT_GE(promoted, trials / 3 + trials / 9 + trials / 27);
  EXPECT_LT(seconds, 20.0);
}

}  // namespace
}  // namespace hippo
