// The halving family (sha, asha, hyperband): which trials go on at each rung and to what length,
// against hand-computed expectations with fixed metric values; failures; save/load; options.
#include "searchers/halving.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "tests/searchers/run_hippo.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using testing::spec_error;

using nlohmann::json;

// Rungs 4, 12, 36, 108 steps with eta 3; evaluations every 10 steps.
json spec_json(const std::string& name) {
  json searcher = {{"name", name},
                   {"metric", "accuracy"},
                   {"mode", "max"},
                   {"eta", 3},
                   {"min_length", {{"steps", 4}}}};
  if (name != "hyperband") searcher["max_trials"] = 27;
  return {{"name", "halving"},
          {"model", {{"type", "mlp"}, {"hidden", {8}}}},
          {"data", {{"name", "fashion-mnist"}, {"train_samples", 1024}}},
          {"fixed", {{"batch_size", 32}, {"optimizer", "sgd"}}},
          {"hyperparameters", {{"lr", {{"loguniform", {0.001, 0.1}}}}}},
          {"searcher", searcher},
          {"length", {{"steps", 108}}},
          {"eval", {{"every", {{"steps", 10}}}}}};
}

// A master stand-in: it carries out the Trains in the order they come (a Stop drops a queued one),
// reporting every evaluation step's value and then closing the trial.
struct Sim {
  explicit Sim(std::function<double(RequestId, int64_t)> v) : value(std::move(v)) {}

  std::function<double(RequestId, int64_t)> value;
  std::set<std::pair<RequestId, int64_t>> fails;    // (trial, length): fails after its evaluations
  std::set<std::pair<RequestId, int64_t>> missing;  // (trial, step): no metric at that step
  std::vector<Operation> ops;                       // all the searcher returned, in order
  std::deque<Train> queue;
  size_t next_eval = 0;  // evaluations of queue.front() reported so far

  void take(const std::vector<Operation>& more) {
    for (const Operation& op : more) {
      ops.push_back(op);
      if (const Train* t = std::get_if<Train>(&op)) queue.push_back(*t);
      if (const Stop* s = std::get_if<Stop>(&op))
        std::erase_if(queue, [&](const Train& t) { return t.trial == s->trial; });
    }
  }
  bool finished() const { return !ops.empty() && std::holds_alternative<Finish>(ops.back()); }
  // Feeds up to `events` events (one evaluation, or the close or failure of a trial).
  void run(Searcher& s, int events = INT_MAX) {
    for (; events > 0 && !queue.empty() && !finished(); --events) {
      const Train& t = queue.front();
      if (next_eval < t.eval_steps.size()) {
        int64_t step = t.eval_steps[next_eval++];
        if (!missing.count({t.trial, step}))
          take(s.on_validation(t.trial, step, value(t.trial, step)));
        continue;
      }
      Train done = t;
      queue.pop_front();
      next_eval = 0;
      take(fails.count({done.trial, done.length}) ? s.on_trial_failed(done.trial)
                                                  : s.on_trial_closed(done.trial));
    }
  }
};

std::vector<Train> trains(const std::vector<Operation>& ops) {
  std::vector<Train> out;
  for (const Operation& op : ops)
    if (const Train* t = std::get_if<Train>(&op)) out.push_back(*t);
  return out;
}

// The trials trained to `length`, in the order of their Trains.
std::vector<RequestId> trained_to(const std::vector<Operation>& ops, int64_t length) {
  std::vector<RequestId> out;
  for (const Train& t : trains(ops))
    if (t.length == length) out.push_back(t.trial);
  return out;
}

std::set<RequestId> stopped(const std::vector<Operation>& ops) {
  std::set<RequestId> out;
  for (const Operation& op : ops)
    if (const Stop* s = std::get_if<Stop>(&op)) out.insert(s->trial);
  return out;
}

// At rung 0 (step 4) trial i is worth (10 i) mod 27, a permutation of 0..26; at rung 1 (12) the
// lower id is better, at rung 2 (36) the higher. Other evaluation steps are noise to be ignored.
double sha_value(RequestId id, int64_t step) {
  if (step == 4) return static_cast<double>(id * 10 % 27);
  if (step == 12) return -static_cast<double>(id);
  if (step == 36) return static_cast<double>(id);
  return step == 108 ? 0.5 : 1000.0;
}

TEST(Sha, TwentySevenTrialsHalveToOne) {
  StudySpec spec = parse_spec(spec_json("sha"));
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Sim sim{sha_value};
  sim.take(s->on_study_start());
  ASSERT_EQ(sim.ops.size(), 54u);
  for (RequestId i = 0; i < 27; ++i) {  // every Create first (see creates_first), then the Trains
    const Create& c = std::get<Create>(sim.ops[i]);
    EXPECT_EQ(c.trial, i);
    EXPECT_EQ(c.params, spec.space.draw(0, i, std::nullopt));  // no grid: seeded draws
    EXPECT_FALSE(c.fork);
    EXPECT_EQ(std::get<Train>(sim.ops[27 + i]), (Train{i, 4, {4}}));
  }
  // Nothing happens until the last of the 27 is closed.
  sim.run(*s, 2 * 26);
  EXPECT_EQ(sim.ops.size(), 54u);
  sim.run(*s, 2);
  // Values 18..26 at rung 0: trials 8 (26), 16 (25), 24 (24), 5 (23), 13 (22), 21 (21), 2 (20),
  // 10 (19), 18 (18), best first; the other 18 are stopped.
  std::vector<Operation> rung0(sim.ops.begin() + 54, sim.ops.end());
  EXPECT_EQ(trained_to(rung0, 12), (std::vector<RequestId>{8, 16, 24, 5, 13, 21, 2, 10, 18}));
  EXPECT_EQ(trains(rung0)[0], (Train{8, 12, {10, 12}}));
  EXPECT_EQ(stopped(rung0).size(), 18u);
  EXPECT_FALSE(stopped(rung0).count(8));
  EXPECT_EQ(rung0.size(), 27u);
  sim.run(*s);
  EXPECT_EQ(trained_to(sim.ops, 36), (std::vector<RequestId>{2, 5, 8}));  // the lowest ids
  EXPECT_EQ(trained_to(sim.ops, 108), (std::vector<RequestId>{8}));       // the highest of those
  EXPECT_EQ(trains(sim.ops).back(),
            (Train{8, 108, {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 108}}));
  EXPECT_EQ(stopped(sim.ops).size(), 18u + 6u + 2u);
  EXPECT_TRUE(sim.finished());
  EXPECT_EQ(std::count_if(sim.ops.begin(), sim.ops.end(),
                          [](const Operation& op) { return std::holds_alternative<Finish>(op); }),
            1);
}

TEST(Halving, ShaAndAshaSurvivorsTrainToMaxLengthWhenItIsNoPowerOfEta) {
  // min 10, max 100, eta 3: rungs 10, 30 and 100 (not 90), as Hyperband's top rung is max_length.
  for (const char* name : {"sha", "asha"}) {
    json j = spec_json(name);
    j["searcher"]["min_length"] = {{"steps", 10}};
    j["searcher"]["max_trials"] = 9;
    j["length"] = {{"steps", 100}};
    std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
    Sim sim{[](RequestId id, int64_t) { return static_cast<double>(id); }};
    sim.take(s->on_study_start());
    sim.run(*s);
    ASSERT_TRUE(sim.finished()) << name;
    std::set<int64_t> lengths;
    for (const Train& t : trains(sim.ops)) lengths.insert(t.length);
    EXPECT_EQ(lengths, (std::set<int64_t>{10, 30, 100})) << name;
    EXPECT_FALSE(trained_to(sim.ops, 100).empty()) << name;
    if (std::string(name) == "sha") {  // 9 -> 3 -> 1: the best, trial 8, to the study's length
      EXPECT_EQ(trains(sim.ops).back(), (Train{8, 100, {10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}));
    }
  }
}

TEST(Sha, FailedTrialsAndMissingMetricsAreNotRanked) {
  Sim sim{sha_value};
  sim.fails = {{8, 4}, {16, 4}};  // the two best at rung 0 fail
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(spec_json("sha")));
  sim.take(s->on_study_start());
  sim.missing = {{24, 4}, {5, 12}};  // the best left at rung 0, and 5 at rung 1 (not at step 10)
  sim.run(*s, 2 * 27);
  // 24 of 27 have a value: the best floor(24 / 3) = 8 go on, 16 are stopped; failed trials and
  // trials without a value are neither promoted nor stopped.
  EXPECT_EQ(trained_to(sim.ops, 12), (std::vector<RequestId>{5, 13, 21, 2, 10, 18, 26, 7}));
  EXPECT_EQ(stopped(sim.ops).size(), 16u);
  for (RequestId id : {8, 16, 24}) EXPECT_FALSE(stopped(sim.ops).count(id));

  // At rung 1 the lower id is better, but 5 has no value at step 12 (the noise at step 10 does not
  // count): floor(7 / 3) = 2 of the other 7 go on.
  sim.fails = {{2, 36}, {7, 36}};
  sim.run(*s, 8 * 3);
  EXPECT_EQ(trained_to(sim.ops, 36), (std::vector<RequestId>{2, 7}));
  EXPECT_FALSE(stopped(sim.ops).count(5));
  // When every trial of a rung fails, the study is over.
  sim.run(*s);
  EXPECT_TRUE(sim.finished());
  EXPECT_TRUE(trained_to(sim.ops, 108).empty());
}

TEST(Sha, TiesGoToTheLowerIdAndMinModeRanksLowFirst) {
  json j = spec_json("sha");
  j["searcher"]["max_trials"] = 6;
  j["searcher"]["mode"] = "min";
  j["searcher"]["metric"] = "loss";
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Sim sim{[](RequestId id, int64_t) { return id == 4 ? 0.1 : id == 5 ? 0.9 : 0.5; }};
  sim.take(s->on_study_start());
  sim.run(*s, 12);
  EXPECT_EQ(trained_to(sim.ops, 12), (std::vector<RequestId>{4, 0}));  // 0.1, then 0.5 (lowest id)
  EXPECT_EQ(stopped(sim.ops), (std::set<RequestId>{1, 2, 3, 5}));
}

TEST(Sha, GridPointsFirstAndEpochsPerTrial) {
  json j = spec_json("sha");
  j["hyperparameters"] = {{"lr", {{"grid", {0.1, 0.01, 0.001}}}},
                          {"batch_size", {{"choice", {32, 64}}}}};
  j["fixed"].erase("batch_size");
  j["searcher"]["max_trials"] = 5;
  j["searcher"]["min_length"] = {{"epochs", 1}};
  j["searcher"]["max_length"] = {{"epochs", 3}};
  j["length"] = {{"epochs", 3}};
  j["eval"] = {{"every", {{"epochs", 1}}}};
  StudySpec spec = parse_spec(j);
  std::vector<Operation> ops = make_searcher(spec)->on_study_start();
  for (RequestId i = 0; i < 5; ++i) {
    const Params& p = std::get<Create>(ops[i]).params;
    EXPECT_EQ(p, spec.space.draw(0, i, i < 3 ? std::optional<uint64_t>(i) : std::nullopt));
    int64_t u = 1024 / p["batch_size"].get<int64_t>();  // one epoch, in this trial's steps
    EXPECT_EQ(std::get<Train>(ops[5 + i]), (Train{i, u, {u}}));
  }
}

TEST(Asha, PromotesAsSoonAsATrialIsInTheTopThird) {
  json j = spec_json("asha");
  j["searcher"]["max_trials"] = 9;
  j["searcher"]["max_length"] = {{"steps", 36}};  // rungs 4, 12, 36
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  std::vector<Operation> ops = s->on_study_start();  // parallel 2 by default
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(trained_to(ops, 4), (std::vector<RequestId>{0, 1}));

  // One closed (or failed) trial and its value at its rung, then what ASHA does: "new" is a new
  // trial trained to rung 0, "-> L" a promotion to length L, "" nothing.
  struct Step {
    RequestId trial;
    int64_t rung_step;
    double value;  // NaN: the trial fails
    std::string then;
    std::string stops = "";  // the trials stopped, when their rung has settled
  };
  const double kFail = std::nan("");
  const std::vector<Step> steps = {
      {0, 4, 0.5, "new 2"},     // rung 0: [0]; floor(1/3) = 0
      {1, 4, 0.7, "new 3"},     // [1, 0]
      {2, 4, 0.9, "2 -> 12"},   // [2, 1, 0]: 2 is in the top 1
      {3, 4, 0.1, "new 4"},     // [2, 1, 0, 3]: the top 1 is promoted already
      {2, 12, 0.3, "new 5"},    // rung 1: [2]
      {4, 4, 0.8, "new 6"},     // [2, 4, 1, 0, 3]
      {5, 4, 0.95, "5 -> 12"},  // [5, 2, 4, 1, 0, 3]: the top 2
      {6, 4, kFail, "new 7"},   // a failure frees its slot
      {5, 12, 0.6, "new 8"},    // rung 1: [5, 2]
      {7, 4, 0.85, ""},         // all 9 created, nothing to promote: one in flight
      // [5, 8, 2, 7, 4, 1, 0, 3]: 8 is in the top 2; rung 0 has settled (none runs to it, none
      // of it can be promoted): its waiting trials are stopped, best first.
      {8, 4, 0.92, "8 -> 12", "7 4 1 0 3"},
      {8, 12, 0.7, "8 -> 36", "5 2"},  // rung 1: [8, 5, 2]: the top 1; then it has settled
      {8, 36, 0.1, "finish"},          // nothing in flight, nothing to promote
  };
  for (const Step& st : steps) {
    SCOPED_TRACE(st.trial);
    if (std::isnan(st.value)) {
      ops = s->on_trial_failed(st.trial);
    } else {
      EXPECT_TRUE(s->on_validation(st.trial, st.rung_step, st.value).empty());
      ops = s->on_trial_closed(st.trial);
    }
    std::string then, stops;
    for (const Operation& op : ops) {
      if (const Create* c = std::get_if<Create>(&op)) then = "new " + std::to_string(c->trial);
      if (const Train* t = std::get_if<Train>(&op)) {
        if (t->length == 4) {
          EXPECT_EQ(then, "new " + std::to_string(t->trial));
        } else {
          then = std::to_string(t->trial) + " -> " + std::to_string(t->length);
        }
      }
      if (std::holds_alternative<Finish>(op)) then = "finish";
      if (const Stop* stop = std::get_if<Stop>(&op))
        stops += (stops.empty() ? "" : " ") + std::to_string(stop->trial);
    }
    EXPECT_EQ(then, st.then);
    EXPECT_EQ(stops, st.stops);
  }
}

TEST(Asha, KeepsParallelTrialsInFlight) {
  json j = spec_json("asha");
  j["searcher"]["parallel"] = 5;
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Sim sim{sha_value};
  sim.take(s->on_study_start());
  EXPECT_EQ(sim.queue.size(), 5u);
  while (!sim.finished()) {
    sim.run(*s, 1);
    ASSERT_LE(sim.queue.size(), 5u);
    if (!sim.finished() && sim.queue.size() < 5u) {  // only when all 27 are created
      EXPECT_EQ(trained_to(sim.ops, 4).size(), 27u);
    }
  }
  EXPECT_TRUE(sim.queue.empty());
  EXPECT_EQ(trained_to(sim.ops, 4).size(), 27u);
  EXPECT_GE(trained_to(sim.ops, 108).size(), 1u);
}

TEST(Hyperband, BracketSizesForEtaThree) {
  // max_length 108 = 4 * 3^3: s_max = 3. Brackets s = 3, 2, 1, 0: ceil(4/(s+1) 3^s) = 27, 12, 6,
  // 4 trials starting at 108 / 3^s = 4, 12, 36, 108 steps.
  StudySpec spec = parse_spec(spec_json("hyperband"));
  std::vector<Operation> ops = make_searcher(spec)->on_study_start();
  ASSERT_EQ(ops.size(), 2u * 49u);
  std::map<int64_t, std::vector<RequestId>> by_length;
  for (const Train& t : trains(ops)) by_length[t.length].push_back(t.trial);
  EXPECT_EQ(by_length[4].size(), 27u);
  EXPECT_EQ(by_length[12].size(), 12u);
  EXPECT_EQ(by_length[36].size(), 6u);
  EXPECT_EQ(by_length[108].size(), 4u);
  EXPECT_EQ(by_length[4].back(), 26);
  EXPECT_EQ(by_length[12].front(), 27);
  EXPECT_EQ(by_length[108].front(), 45);

  // Each bracket halves on its own: 27 -> 9 -> 3 -> 1, 12 -> 4 -> 1, 6 -> 2, 4.
  Sim sim{[](RequestId id, int64_t) { return static_cast<double>(id); }};
  std::unique_ptr<Searcher> s = make_searcher(spec);
  sim.take(s->on_study_start());
  sim.run(*s);
  EXPECT_TRUE(sim.finished());
  EXPECT_EQ(trained_to(sim.ops, 12).size(), 12u + 9u);
  EXPECT_EQ(trained_to(sim.ops, 36).size(), 6u + 4u + 3u);
  EXPECT_EQ(trained_to(sim.ops, 108), (std::vector<RequestId>{45, 46, 47, 48, 44, 43, 38, 26}));

  json j = spec_json("hyperband");
  j["searcher"]["brackets"] = 2;  // s = 3 and 2 only
  EXPECT_EQ(trains(make_searcher(parse_spec(j))->on_study_start()).size(), 27u + 12u);
  j["searcher"]["max_trials"] = 30;  // the cap leaves out the last trials
  ops = make_searcher(parse_spec(j))->on_study_start();
  EXPECT_EQ(trained_to(ops, 4).size(), 27u);
  EXPECT_EQ(trained_to(ops, 12), (std::vector<RequestId>{27, 28, 29}));
}

std::vector<RequestId> created(const std::vector<Operation>& ops) {
  std::vector<RequestId> out;
  for (const Operation& op : ops)
    if (const Create* c = std::get_if<Create>(&op)) out.push_back(c->trial);
  return out;
}

// Runs the study to its end one event at a time: the trials each event created, by event.
std::vector<std::vector<RequestId>> creations(Sim& sim, Searcher& s) {
  std::vector<std::vector<RequestId>> out = {created(sim.ops)};
  while (!sim.queue.empty() && !sim.finished()) {
    const size_t before = sim.ops.size();
    sim.run(s, 1);
    std::vector<RequestId> ids =
        created(std::vector<Operation>(sim.ops.begin() + before, sim.ops.end()));
    if (!ids.empty()) out.push_back(std::move(ids));
  }
  return out;
}

std::vector<RequestId> ids(RequestId first, RequestId last) {
  std::vector<RequestId> out;
  for (RequestId id = first; id < last; ++id) out.push_back(id);
  return out;
}

// `iterations` 3 repeats the brackets (27, 12, 6, 4 trials) three times, trial ids continuing.
// Without a model an iteration starts when every bracket of the one before has finished its first
// rung, while their later rungs still train; each iteration halves as the first one did.
TEST(Hyperband, IterationsRepeatTheBracketsWithoutAModel) {
  json j = spec_json("hyperband");
  j["searcher"]["iterations"] = 3;
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  EXPECT_EQ(s->most_trials(), 147u);
  Sim sim{[](RequestId id, int64_t) { return static_cast<double>(id % 49); }};
  sim.take(s->on_study_start());
  EXPECT_EQ(creations(sim, *s),
            (std::vector<std::vector<RequestId>>{ids(0, 49), ids(49, 98), ids(98, 147)}));
  EXPECT_TRUE(sim.finished());
  // When trial 49 was created, each bracket of the first iteration had its rung 1 in training
  // (27 -> 9 at 12 steps, 12 -> 4 at 36, 6 -> 2 at 108), and the top rungs came after.
  auto at = std::find_if(sim.ops.begin(), sim.ops.end(), [](const Operation& op) {
    return std::holds_alternative<Create>(op) && std::get<Create>(op).trial == 49;
  });
  const std::vector<Operation> before(sim.ops.begin(), at), after(at, sim.ops.end());
  EXPECT_EQ(trained_to(before, 12).size(), 12u + 9u);
  EXPECT_EQ(trained_to(before, 36).size(), 6u + 4u);
  EXPECT_EQ(trained_to(before, 108), (std::vector<RequestId>{45, 46, 47, 48, 44, 43}));
  const std::vector<RequestId> later = trained_to(after, 108);
  EXPECT_NE(std::find(later.begin(), later.end(), 26), later.end());  // bracket 0's top rung
  std::vector<RequestId> top = trained_to(sim.ops, 108);
  std::sort(top.begin(), top.end());
  std::vector<RequestId> expected;
  for (RequestId base : {0, 49, 98})
    for (RequestId id : {26, 38, 43, 44, 45, 46, 47, 48}) expected.push_back(base + id);
  EXPECT_EQ(top, expected);

  j["searcher"]["max_trials"] = 60;  // the cap cuts the second iteration's first bracket
  s = make_searcher(parse_spec(j));
  EXPECT_EQ(s->most_trials(), 60u);
  Sim capped{[](RequestId id, int64_t) { return static_cast<double>(id); }};
  capped.take(s->on_study_start());
  EXPECT_EQ(creations(capped, *s), (std::vector<std::vector<RequestId>>{ids(0, 49), ids(49, 60)}));
  EXPECT_TRUE(capped.finished());
}

// With a model each bracket is drawn when the one before has finished its first rung, from one
// iteration to the next: 27, 12, 6, 4, 27, 12, 6, 4, ...
TEST(Hyperband, IterationsWithAModelStartBracketsInTurn) {
  json j = spec_json("hyperband");
  j["searcher"]["iterations"] = 3;
  j["searcher"]["sampler"] = {{"name", "tpe"}, {"n_startup", 4}};
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Sim sim{sha_value};
  sim.take(s->on_study_start());
  std::vector<std::vector<RequestId>> order = creations(sim, *s);
  EXPECT_TRUE(sim.finished());
  std::vector<std::vector<RequestId>> expected;
  for (RequestId first = 0; first < 147;)
    for (RequestId size : {27, 12, 6, 4}) {
      expected.push_back(ids(first, first + size));
      first += size;
    }
  EXPECT_EQ(order, expected);
}

// Saves `spec`'s searcher `cut` events after trial `from` was created, loads the state into a
// new one, and runs both to the end: they must decide identically.
void expect_restores_identically(const json& spec_json, RequestId from, int cut) {
  StudySpec spec = parse_spec(spec_json);
  std::unique_ptr<Searcher> a = make_searcher(spec);
  Sim sim_a{sha_value};
  sim_a.fails = {{3, 4}, {5, 12}, {52, 4}};
  sim_a.take(a->on_study_start());
  while (!sim_a.finished() && a->save()["trials"].size() <= static_cast<size_t>(from))
    sim_a.run(*a, 1);
  sim_a.run(*a, cut);
  std::unique_ptr<Searcher> b = make_searcher(spec);
  b->load(json::parse(a->save().dump()));  // through text, as the search plan keeps it
  EXPECT_EQ(b->save(), a->save());
  Sim sim_b = sim_a;
  sim_a.run(*a);
  sim_b.run(*b);
  EXPECT_TRUE(sim_a.finished());
  EXPECT_EQ(sim_a.ops, sim_b.ops);
  EXPECT_EQ(a->save(), b->save());
}

// Many iterations make many brackets: a trial finds its own by bisection (a linear scan would cost
// minutes at the grid's limit, a million trials in 80,000 brackets). 2,000 iterations (98,000
// trials) run and reload in 0.4 s in Release (0.9 s with the scan).
TEST(Hyperband, ManyIterationsStayFast) {
#ifdef HIPPO_SANITIZED
  const int64_t iterations = 400;
#else
  const int64_t iterations = 2000;
#endif
  json j = spec_json("hyperband");
  j["searcher"]["iterations"] = iterations;
  StudySpec spec = parse_spec(j);
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Sim sim{[](RequestId id, int64_t) { return static_cast<double>(id % 49); }};
  sim.take(s->on_study_start());
  sim.run(*s);
  EXPECT_TRUE(sim.finished());
  EXPECT_EQ(created(sim.ops).size(), static_cast<size_t>(49 * iterations));
  make_searcher(spec)->load(s->save());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
  EXPECT_LT(seconds, 20.0);
}

// End to end in `hippo simulate`: a study budget ends an iterated hyperband done, saying so,
// after more than one iteration's trials and long before its 100 iterations.
TEST(Hyperband, AStudyBudgetStopsItsIterations) {
  json j = spec_json("hyperband");
  j["searcher"]["iterations"] = 100;
  j["budget"] = {{"steps", 5000}};
  const std::string file = ::testing::TempDir() + "hyperband-iterations.json";
  std::ofstream(file) << j.dump();
  hippo::testing::Outcome run = hippo::testing::hippo(
      "--log-level warning --format json simulate " + file + " --workers 4 --step-time 0.01");
  ASSERT_EQ(run.status, 0) << run.output;
  const json study = json::parse(hippo::testing::last_line(run.output))["shared"]["studies"][0];
  EXPECT_EQ(study["status"], "done") << study;
  EXPECT_NE(study["error"].get<std::string>().find("its budget of 5000 steps is spent"),
            std::string::npos)
      << study;
  EXPECT_GT(study["trials"].get<int64_t>(), 49) << study;
  EXPECT_LT(study["trials"].get<int64_t>(), 49 * 20) << study;
}

TEST(Halving, SaveAndLoadContinueIdentically) {
  for (const char* name : {"sha", "asha", "hyperband"}) {
    SCOPED_TRACE(name);
    // Cut after 1, 2, ... events: mid-rung, between a validation and its close, after a failure.
    for (int cut : {1, 40, 55, 81, 90}) {
      SCOPED_TRACE(cut);
      expect_restores_identically(spec_json(name), 0, cut);
    }
  }
  // Hyperband's second iteration (trials 49 to 97), with and without a model.
  json iterated = spec_json("hyperband");
  iterated["searcher"]["iterations"] = 3;
  for (json sampler : {json(nullptr), json{{"name", "tpe"}, {"n_startup", 4}}}) {
    SCOPED_TRACE(sampler.dump());
    if (!sampler.is_null()) iterated["searcher"]["sampler"] = sampler;
    for (int cut : {0, 7, 60}) {
      SCOPED_TRACE(cut);
      expect_restores_identically(iterated, 49, cut);
    }
  }
}

TEST(Halving, RefusesBadStateAndUnknownTrials) {
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(spec_json("sha")));
  s->on_study_start();
  json good = s->save();
  EXPECT_THROW(s->load(json::array()), SpecError);
  EXPECT_THROW(s->load({{"trials", json::array()}, {"extra", 1}}), SpecError);
  json bad = good;
  bad["trials"].push_back(good["trials"][0]);  // 28 trials
  EXPECT_THROW(s->load(bad), SpecError);
  bad = good;
  bad["trials"][0]["values"] = {1, 2, 3, 4, 5};  // more than 4 rungs
  EXPECT_THROW(s->load(bad), SpecError);
  bad["trials"][0]["values"] = {"x"};
  EXPECT_THROW(s->load(bad), SpecError);
  EXPECT_EQ(s->save(), good);  // unchanged by what it refused
  EXPECT_THROW(s->on_trial_closed(27), std::invalid_argument);
  EXPECT_THROW(s->on_validation(-1, 4, 0.5), std::invalid_argument);
}

TEST(Halving, OptionErrorsNameTheirField) {
  auto with = [](const std::string& name, const json& options) {
    json j = spec_json(name);
    for (const auto& [k, v] : options.items()) {
      if (v.is_null())
        j["searcher"].erase(k);
      else
        j["searcher"][k] = v;
    }
    return spec_error(j);
  };
  EXPECT_EQ(with("sha", {{"eta", 1}}), "searcher.eta: expected an integer >= 2, got 1");
  EXPECT_EQ(with("asha", {{"eta", 2.5}}), "searcher.eta: expected an integer, got 2.5");
  EXPECT_EQ(with("sha", {{"min_length", nullptr}}), "searcher.min_length: missing");
  EXPECT_EQ(with("sha", {{"min_length", {{"minutes", 3}}}}),
            "searcher.min_length.minutes: unknown field");
  EXPECT_EQ(with("sha", {{"max_length", 7}}),
            "searcher.max_length: expected {\"steps\": N} or {\"epochs\": E}, got 7");
  EXPECT_EQ(with("sha", {{"min_length", {{"steps", 200}}}}),
            "searcher.min_length: longer than max_length (by default the spec's length)");
  EXPECT_EQ(with("sha", {{"max_trials", nullptr}}), "searcher.max_trials: missing (sha needs it)");
  EXPECT_EQ(with("asha", {{"max_trials", nullptr}}),
            "searcher.max_trials: missing (asha needs it)");
  EXPECT_EQ(with("sha", {{"parallel", 2}}), "searcher.parallel: unknown field");
  EXPECT_EQ(with("asha", {{"parallel", 0}}), "searcher.parallel: expected an integer >= 1, got 0");
  EXPECT_EQ(with("asha", {{"brackets", 1}}), "searcher.brackets: unknown field");
  EXPECT_EQ(with("hyperband", {{"brackets", 5}}),
            "searcher.brackets: expected an integer in [1, 4], got 5");
  EXPECT_EQ(
      with("hyperband", {{"min_length", {{"steps", 1}}}, {"max_length", {{"steps", 10000000}}}}),
      "searcher.max_trials: hyperband's brackets have 7453491 trials; give max_trials to "
      "cap them");
  EXPECT_EQ(with("hyperband", {{"min_length", {{"steps", 1}}},
                               {"max_length", {{"steps", 10000000}}},
                               {"max_trials", 100}}),
            "accepted");
  EXPECT_EQ(with("hyperband", {{"iterations", 0}}),
            "searcher.iterations: expected an integer >= 1, got 0");
  EXPECT_EQ(with("hyperband", {{"iterations", -1}}),
            "searcher.iterations: expected an integer >= 1, got -1");
  EXPECT_EQ(with("hyperband", {{"iterations", "x"}}),
            "searcher.iterations: expected an integer, got \"x\"");
  EXPECT_EQ(with("hyperband", {{"iterations", 2.5}}),
            "searcher.iterations: expected an integer, got 2.5");
  EXPECT_EQ(with("sha", {{"iterations", 2}}), "searcher.iterations: unknown field");
  // The grid's limit counts every iteration: 49 trials each.
  EXPECT_EQ(with("hyperband", {{"iterations", 20408}}), "accepted");
  EXPECT_EQ(with("hyperband", {{"iterations", 20409}}),
            "searcher.max_trials: hyperband's brackets have 1000041 trials; give max_trials to "
            "cap them");
  EXPECT_EQ(with("hyperband", {{"iterations", INT64_MAX}}),
            "searcher.max_trials: hyperband's brackets have more than 1000000 trials; give "
            "max_trials to cap them");
  EXPECT_EQ(with("hyperband", {{"iterations", INT64_MAX}, {"max_trials", 1000}}), "accepted");

  json j = spec_json("sha");  // epochs: U differs between trials
  j["fixed"].erase("batch_size");
  j["hyperparameters"]["batch_size"] = {{"choice", {32, 64}}};
  j["searcher"]["min_length"] = {{"epochs", 1}};
  EXPECT_EQ(spec_error(j),
            "searcher.min_length: give min_length and max_length in one unit: the steps of an "
            "epoch differ between trials (batch_size is drawn)");
  j["hyperparameters"]["batch_size"] = {{"schedule", "constant"}, {"value", 32}};
  EXPECT_EQ(spec_error(j),
            "searcher.min_length.epochs: epoch units are not possible here: the trials have no "
            "batch size that is constant within a trial");
  j["hyperparameters"]["batch_size"] = 64;  // one U (16): 1 epoch = 16 <= 108 steps
  EXPECT_EQ(spec_error(j), "accepted");
}

}  // namespace
}  // namespace hippo
