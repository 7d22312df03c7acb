// median_stop, pbt and tpe: decisions against hand-computed expectations for fixed metric values,
// save/load round trips that continue identically, and option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "searchers/searcher.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using testing::spec_error;

using nlohmann::json;
using Ops = std::vector<Operation>;
using Steps = std::vector<int64_t>;

// 1280 samples of 128: 10 steps an epoch. 40 steps, evaluated every 10.
json study(json hyperparameters, json searcher) {
  return {{"name", "popsearch"},
          {"model", {{"type", "mlp"}, {"hidden", {8}}}},
          {"data", {{"name", "fashion-mnist"}, {"train_samples", 1280}, {"eval_samples", 256}}},
          {"seed", 7},
          {"fixed", {{"batch_size", 128}, {"optimizer", "sgd"}}},
          {"hyperparameters", std::move(hyperparameters)},
          {"searcher", std::move(searcher)},
          {"length", {{"steps", 40}}},
          {"eval", {{"every", {{"steps", 10}}}}}};
}

// An event the master sends.
struct Event {
  enum Kind { kValidation, kClosed, kFailed } kind;
  RequestId trial;
  int64_t step = 0;
  double value = 0;
};
Event validation(RequestId t, int64_t step, double value) {
  return {Event::kValidation, t, step, value};
}
Event closed(RequestId t) {
  return {Event::kClosed, t};
}
Event failed(RequestId t) {
  return {Event::kFailed, t};
}

Ops feed(Searcher& s, const Event& e) {
  switch (e.kind) {
    case Event::kValidation:
      return s.on_validation(e.trial, e.step, e.value);
    case Event::kClosed:
      return s.on_trial_closed(e.trial);
    case Event::kFailed:
      return s.on_trial_failed(e.trial);
  }
  return {};
}

// Plays `events` on a searcher; at each cut point a copy restored from save() (through text, as
// the search plan keeps it) must answer the rest of the events exactly like the original.
void expect_restores_identically(const json& spec_json, const std::vector<Event>& events) {
  StudySpec spec = parse_spec(spec_json);
  for (size_t cut = 0; cut <= events.size(); cut += 3) {
    std::unique_ptr<Searcher> a = make_searcher(spec);
    a->on_study_start();
    for (size_t i = 0; i < cut; ++i) feed(*a, events[i]);
    std::unique_ptr<Searcher> b = make_searcher(spec);
    b->load(json::parse(a->save().dump()));
    EXPECT_EQ(b->save(), a->save());
    for (size_t i = cut; i < events.size(); ++i)
      ASSERT_EQ(feed(*b, events[i]), feed(*a, events[i])) << "cut " << cut << ", event " << i;
    EXPECT_EQ(b->save(), a->save());
  }
}

// ---------------------------------------------------------------------------------------------
// median_stop

json median_study(json options = json::object()) {
  json searcher = {{"name", "median_stop"}, {"metric", "accuracy"}, {"mode", "max"}};
  searcher.update(options);
  return study({{"lr", {{"grid", {0.1, 0.2, 0.3, 0.4, 0.5}}}}}, searcher);
}

// Five grid points, two in flight, min_trials 2; grace: the first evaluation (step 10).
const std::vector<Event> kMedianEvents = {
    validation(0, 10, 0.5), validation(1, 10, 0.6),
    validation(0, 20, 0.6),  // no trial has completed: nothing is judged
    validation(1, 20, 0.2), validation(0, 30, 0.7), validation(1, 30, 0.3), validation(0, 40, 0.8),
    closed(0),                          // -> trial 2
    validation(1, 40, 0.4), closed(1),  // -> trial 3; completed: 0 and 1
    validation(2, 10, 0.1),             // within the grace
    // Completed at 20: 0.6 0.2, median 0.4; trial 2's best so far 0.5 is not worse.
    validation(2, 20, 0.5), validation(3, 10, 0.9),
    // Trial 3's value at 20 is below the median, but its best so far (0.9) is not.
    validation(3, 20, 0.3),
    // Completed at 30: 0.7 0.3, median 0.5; trial 2's best so far 0.5 is not worse.
    validation(2, 30, 0.45), validation(3, 30, 0.4), validation(2, 40, 0.5),
    closed(2),  // -> trial 4
    validation(4, 10, 0.1),
    // Completed at 20: 0.6 0.2 0.5, median 0.5: trial 4's best 0.15 is worse -> Stop 4.
    validation(4, 20, 0.15), validation(3, 40, 0.95), closed(3)};

TEST(MedianStop, StopsATrialWhoseBestIsWorseThanTheCompletedTrialsMedian) {
  StudySpec spec = parse_spec(median_study({{"parallel", 2}, {"min_trials", 2}}));
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Ops start = s->on_study_start();
  ASSERT_EQ(start.size(), 4u);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(start[2 * i], Operation(Create{i, spec.space.draw(7, i, i), std::nullopt}));
    EXPECT_EQ(start[2 * i + 1], Operation(Train{i, 40, Steps{10, 20, 30, 40}}));
  }
  auto created = [&](RequestId id) {
    return Ops{Create{id, spec.space.draw(7, id, id), std::nullopt},
               Train{id, 40, Steps{10, 20, 30, 40}}};
  };
  std::vector<Ops> answers;
  for (const Event& e : kMedianEvents) answers.push_back(feed(*s, e));
  for (size_t i = 0; i < answers.size(); ++i) {
    if (i == 7)
      EXPECT_EQ(answers[i], created(2));
    else if (i == 9)
      EXPECT_EQ(answers[i], created(3));
    else if (i == 17)
      EXPECT_EQ(answers[i], created(4));
    else if (i == 19)
      EXPECT_EQ(answers[i], Ops{Stop{4}});  // the last trial: nothing to create
    else if (i + 1 == answers.size())
      EXPECT_EQ(answers[i], Ops{Finish{}});
    else
      EXPECT_TRUE(answers[i].empty()) << "event " << i << ": " << answers[i].size() << " ops";
  }
}

TEST(MedianStop, GraceAndMinTrials) {
  // Trial 4's 0.15 at step 20 is not judged within a grace of 2 epochs (20 steps), nor before
  // four trials have completed.
  for (json options :
       {json{{"grace", {{"epochs", 2}}}, {"min_trials", 2}}, json{{"min_trials", 4}}}) {
    options["parallel"] = 2;
    std::unique_ptr<Searcher> s = make_searcher(parse_spec(median_study(options)));
    s->on_study_start();
    for (size_t i = 0; i < kMedianEvents.size(); ++i) {
      Ops ops = feed(*s, kMedianEvents[i]);
      for (const Operation& op : ops) EXPECT_FALSE(std::holds_alternative<Stop>(op)) << options;
    }
  }
}

// Optuna's MedianPruner.prune (optuna/pruners/_percentile.py, percentile 50), written from its
// definition over what the test saw happen: the trials that completed, and every value reported.
struct History {
  std::map<RequestId, std::map<int64_t, double>> values;
  std::set<RequestId> completed;
};

bool optuna_median_prunes(const History& h, RequestId trial, int64_t step, bool maximize,
                          int64_t n_startup_trials, int64_t n_warmup_steps) {
  if (h.completed.empty() || static_cast<int64_t>(h.completed.size()) < n_startup_trials)
    return false;
  if (step < n_warmup_steps) return false;
  double best = NAN;  // np.nanmax / np.nanmin over the trial's intermediate values
  for (const auto& [s, v] : h.values.at(trial))
    if (!std::isnan(v) && (std::isnan(best) || (maximize ? v > best : v < best))) best = v;
  if (std::isnan(best)) return true;
  std::vector<double> at_step;  // np.nanpercentile(..., 50): NaN dropped, linear interpolation
  for (RequestId t : h.completed) {
    auto it = h.values.at(t).find(step);
    if (it != h.values.at(t).end() && !std::isnan(it->second)) at_step.push_back(it->second);
  }
  if (at_step.empty()) return false;
  std::sort(at_step.begin(), at_step.end());
  double position = 0.5 * double(at_step.size() - 1);
  size_t below = static_cast<size_t>(position);
  double p =
      at_step[below] + (position - double(below)) *
                           (at_step[std::min(below + 1, at_step.size() - 1)] - at_step[below]);
  return maximize ? best < p : best > p;
}

TEST(MedianStop, DecidesAsOptunasMedianPrunerOnRandomHistories) {
  int64_t judged = 0, stops = 0;
  for (uint64_t seed = 0; seed < 150; ++seed) {
    std::mt19937_64 random(seed);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(random);
    };
    const bool maximize = uniform(0, 1);
    const int64_t min_trials = uniform(1, 5), parallel = uniform(1, 4);
    json j = median_study({{"max_trials", uniform(4, 16)},
                           {"parallel", parallel},
                           {"min_trials", min_trials},
                           {"mode", maximize ? "max" : "min"}});
    j["hyperparameters"]["lr"] = {{"uniform", {0.01, 1.0}}};
    std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
    History h;
    std::vector<RequestId> running;
    std::map<RequestId, size_t> reported;  // evaluations reported so far
    auto apply = [&](const Ops& ops) {
      for (const Operation& op : ops)
        if (const Create* c = std::get_if<Create>(&op)) running.push_back(c->trial);
    };
    apply(s->on_study_start());
    const Steps evals = {10, 20, 30, 40};
    while (!running.empty()) {
      size_t pick = static_cast<size_t>(uniform(0, int64_t(running.size()) - 1));
      RequestId t = running[pick];
      int64_t step = evals[reported[t]++];
      double value = uniform(0, 19) == 0 ? NAN : std::uniform_real_distribution<>(0, 1)(random);
      h.values[t][step] = value;
      // Judged as Optuna would, except the last step (trained already: nothing left to save).
      bool expected = step < 40 && optuna_median_prunes(h, t, step, maximize, min_trials, 11);
      Ops ops = s->on_validation(t, step, value);
      bool stopped = !ops.empty() && ops.front() == Operation(Stop{t});
      ASSERT_EQ(stopped, expected) << "seed " << seed << ", trial " << t << ", step " << step;
      judged += step < 40;
      stops += stopped;
      if (stopped || step == 40) {
        running.erase(running.begin() + static_cast<ptrdiff_t>(pick));
        if (!stopped) {
          h.completed.insert(t);
          ops = s->on_trial_closed(t);
        }
        apply(ops);
      }
    }
  }
  EXPECT_GT(judged, 1000);
  EXPECT_GT(stops, 100);  // the rule did decide things
}

TEST(MedianStop, TheExampleStopsNoTrialBeforeAnyHasCompleted) {
  json j = json::parse(std::ifstream(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-median-stop.json"));
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Ops start = s->on_study_start();
  std::vector<RequestId> first;
  for (const Operation& op : start)
    if (const Create* c = std::get_if<Create>(&op)) first.push_back(c->trial);
  ASSERT_FALSE(first.empty());
  // Every running trial reports a poor value at every evaluation before the last: none is stopped.
  for (int64_t step : parse_spec(j).eval_steps(Params::object()))
    for (RequestId t : first)
      EXPECT_TRUE(s->on_validation(t, step, 0.01 * double(t)).empty()) << "trial " << t;
}

TEST(MedianStop, KeepsParallelInFlightAndFinishesAfterFailures) {
  json j = median_study({{"max_trials", 3}});  // the grid has 5 points
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Ops start = s->on_study_start();
  ASSERT_EQ(start.size(), 4u);  // trials 0 and 1
  Ops next = s->on_trial_failed(1);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(std::get<Create>(next[0]).trial, 2);
  EXPECT_TRUE(s->on_trial_closed(0).empty());
  EXPECT_EQ(s->on_trial_closed(2), Ops{Finish{}});
}

TEST(MedianStop, SaveAndLoadContinueIdentically) {
  expect_restores_identically(median_study({{"parallel", 2}, {"min_trials", 2}}), kMedianEvents);
  // A diverged trial reaches the searcher as the worst value: infinite, which JSON cannot hold.
  std::vector<Event> diverged = kMedianEvents;
  diverged[3].value = -INFINITY;
  diverged[18].value = -INFINITY;
  expect_restores_identically(median_study({{"parallel", 2}, {"min_trials", 2}}), diverged);
}

TEST(MedianStop, OptionErrors) {
  EXPECT_EQ(spec_error(median_study({{"parallel", 0}})),
            "searcher.parallel: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(spec_error(median_study({{"min_trials", 0}})),
            "searcher.min_trials: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(spec_error(median_study({{"grace", 3}})),
            "searcher.grace: expected {\"steps\": N} or {\"epochs\": E}, got 3");
  EXPECT_EQ(
      spec_error(median_study({{"grace", {{"steps", 0}}}})).rfind("searcher.grace.steps: ", 0), 0u);
  EXPECT_EQ(spec_error(median_study({{"patience", 1}})), "searcher.patience: unknown field");
  json drawn = median_study();
  drawn["hyperparameters"]["lr"] = {{"loguniform", {0.01, 1}}};
  EXPECT_EQ(spec_error(drawn), "searcher.max_trials: missing (the space has no grid)");
}

// ---------------------------------------------------------------------------------------------
// pbt

json pbt_study(json options = json::object()) {
  json searcher = {{"name", "pbt"},   {"metric", "accuracy"},        {"mode", "max"},
                   {"population", 4}, {"interval", {{"steps", 10}}}, {"perturb", {2.0}},
                   {"resample", 0}};
  searcher.update(options);
  json j = study({{"lr", {{"uniform", {0.01, 1.0}}}},
                  {"momentum", {{"choice", {0.5, 0.9}}}},
                  {"batch_size", {{"int", {16, 64}}}}},
                 searcher);
  j["fixed"].erase("batch_size");
  j["length"] = {{"steps", 30}};
  return j;
}

// Generation 1 ranks 1 > 2 > 0 > 3; generation 2 ranks 4 > 2 > 1 > 0.
const std::vector<Event> kPbtEvents = {
    validation(0, 10, 0.3), closed(0), validation(1, 10, 0.9), closed(1),
    validation(2, 10, 0.5), closed(2), validation(3, 10, 0.1), closed(3),
    validation(0, 20, 0.2), closed(0), validation(1, 20, 0.6), closed(1),
    validation(2, 20, 0.7), closed(2), validation(4, 20, 0.8), closed(4),
    validation(1, 30, 0.6), closed(1), validation(2, 30, 0.7), closed(2),
    validation(4, 30, 0.8), closed(4), validation(5, 30, 0.9), closed(5)};

// With resample 0 and the one factor 2: numbers doubled and clipped (lr to 1, batch_size to 64,
// rounded), the momentum choice kept.
Params doubled(const Params& p) {
  return {{"lr", std::min(1.0, p["lr"].get<double>() * 2)},
          {"momentum", p["momentum"]},
          {"batch_size", std::min<int64_t>(64, p["batch_size"].get<int64_t>() * 2)}};
}

TEST(Pbt, ReplacesTheWorstByAPerturbedForkOfTheBest) {
  StudySpec spec = parse_spec(pbt_study());
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Ops start = s->on_study_start();
  ASSERT_EQ(start.size(), 8u);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(start[2 * i],
              Operation(Create{i, spec.space.draw(7, i, std::nullopt), std::nullopt}));
    EXPECT_EQ(start[2 * i + 1], Operation(Train{i, 10, Steps{10}}));
  }
  std::vector<Ops> answers;
  for (const Event& e : kPbtEvents) answers.push_back(feed(*s, e));
  Params p4 = doubled(spec.space.draw(7, 1, std::nullopt));  // trial 1's, perturbed
  Params p5 = doubled(p4);
  for (size_t i = 0; i < answers.size(); ++i) {
    if (i == 7)  // population 4, fraction 0.25: the worst one (3) goes, the best one (1) donates
      EXPECT_EQ(answers[i],
                (Ops{Stop{3}, Create{4, p4, Fork{1, 10}}, Train{0, 20, Steps{20}},
                     Train{1, 20, Steps{20}}, Train{2, 20, Steps{20}}, Train{4, 20, Steps{20}}}));
    else if (i == 15)
      EXPECT_EQ(answers[i],
                (Ops{Stop{0}, Create{5, p5, Fork{4, 20}}, Train{1, 30, Steps{30}},
                     Train{2, 30, Steps{30}}, Train{4, 30, Steps{30}}, Train{5, 30, Steps{30}}}));
    else if (i + 1 == answers.size())  // the spec's length
      EXPECT_EQ(answers[i], Ops{Finish{}});
    else
      EXPECT_TRUE(answers[i].empty()) << "event " << i;
  }
}

TEST(Pbt, ResamplesWithProbabilityOne) {
  StudySpec spec = parse_spec(pbt_study({{"resample", 1}}));
  std::unique_ptr<Searcher> s = make_searcher(spec);
  s->on_study_start();
  Ops last;
  for (size_t i = 0; i < 8; ++i) last = feed(*s, kPbtEvents[i]);
  EXPECT_EQ(last.at(1), Operation(Create{4, spec.space.draw(7, 4, std::nullopt), Fork{1, 10}}));
}

// A fork goes on from its donor's state, so it keeps the donor's architecture even where every
// other leaf is drawn anew.
TEST(Pbt, AForkKeepsItsDonorsArchitecture) {
  json j = pbt_study({{"resample", 1}});
  j["model"]["hidden"] = {{"choice", {{8}, {16}, {32}, {8, 8}}}};
  StudySpec spec = parse_spec(j);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  s->on_study_start();
  Ops last;
  for (size_t i = 0; i < 8; ++i) last = feed(*s, kPbtEvents[i]);
  Params expected = spec.space.draw(7, 4, std::nullopt);
  expected["model.hidden"] = spec.space.draw(7, 1, std::nullopt)["model.hidden"];  // trial 1's
  const Create* fork = std::get_if<Create>(&last.at(1));
  ASSERT_NE(fork, nullptr);
  EXPECT_EQ(fork->params, expected);
  EXPECT_EQ(fork->fork, (Fork{1, 10}));
}

TEST(Pbt, EvaluatesTheSpecStepsWithinAGenerationAndReplacesAFailedMember) {
  json j = pbt_study({{"interval", {{"epochs", 2}}}});
  j["hyperparameters"]["batch_size"] = 128;
  j["length"] = {{"epochs", 3}};
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  Ops start = s->on_study_start();
  EXPECT_EQ(start.at(1), Operation(Train{0, 20, Steps{10, 20}}));
  EXPECT_TRUE(s->on_trial_failed(3).empty());
  Ops next;
  for (RequestId t : {0, 1, 2}) {
    s->on_validation(t, 20, 0.1 * double(t));
    next = s->on_trial_closed(t);
  }
  // Ranked 2 > 1 > 0 > 3 (failed): q = 1, and the failed member is the worst: 3 is replaced by a
  // fork of 2 (no Stop: it ended already), 0 stays. Four members train to 30, the spec's length.
  ASSERT_EQ(next.size(), 5u);
  EXPECT_EQ(std::get<Create>(next[0]).trial, 4);
  EXPECT_EQ(std::get<Create>(next[0]).fork, (Fork{2, 20}));
  EXPECT_EQ(next[1], Operation(Train{0, 30, Steps{30}}));
  EXPECT_EQ(next[4], Operation(Train{4, 30, Steps{30}}));
}

TEST(Pbt, ThePopulationKeepsItsSizeAfterFailures) {
  // Population 6, fraction 0.25: q = round(1.5) = 2. Three members fail in generation 1: all
  // three are replaced (more than q), by forks of the best two alive; generation 2 has 6 members.
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(pbt_study({{"population", 6}})));
  s->on_study_start();
  for (RequestId t : {1, 3, 4}) EXPECT_TRUE(s->on_trial_failed(t).empty());
  s->on_validation(0, 10, 0.5);
  EXPECT_TRUE(s->on_trial_closed(0).empty());
  s->on_validation(2, 10, 0.9);
  EXPECT_TRUE(s->on_trial_closed(2).empty());
  s->on_validation(5, 10, 0.1);
  Ops next = s->on_trial_closed(5);
  std::vector<RequestId> trained, donors;
  for (const Operation& op : next) {
    EXPECT_FALSE(std::holds_alternative<Stop>(op)) << "the three alive stay (3 >= q replaced)";
    if (const Create* c = std::get_if<Create>(&op)) donors.push_back(c->fork->donor);
    if (const Train* t = std::get_if<Train>(&op)) trained.push_back(t->trial);
  }
  EXPECT_EQ(trained, (std::vector<RequestId>{0, 2, 5, 6, 7, 8}));
  for (RequestId d : donors) EXPECT_TRUE(d == 2 || d == 0) << d;  // the best two alive
  // Generation 2: all six report; the worst two (q) are replaced, as with no failure.
  for (RequestId t : trained) s->on_validation(t, 20, 0.1 * double(t));
  for (size_t i = 0; i + 1 < trained.size(); ++i)
    EXPECT_TRUE(s->on_trial_closed(trained[i]).empty());
  next = s->on_trial_closed(trained.back());
  EXPECT_EQ(std::count_if(next.begin(), next.end(),
                          [](const Operation& op) { return std::holds_alternative<Stop>(op); }),
            2);
  EXPECT_EQ(std::count_if(next.begin(), next.end(),
                          [](const Operation& op) { return std::holds_alternative<Train>(op); }),
            6);
  // Everyone fails in the last generation: the study ends (the operations of the last failure).
  std::vector<RequestId> last_generation;
  for (const Operation& op : next)
    if (const Train* t = std::get_if<Train>(&op)) last_generation.push_back(t->trial);
  Ops end;
  for (RequestId t : last_generation) end = s->on_trial_failed(t);
  EXPECT_EQ(end, Ops{Finish{}});
}

TEST(Pbt, SaveAndLoadContinueIdentically) {
  expect_restores_identically(pbt_study(), kPbtEvents);
  // A failure, kept until the generation ends; a diverged member (the worst value, infinite).
  std::vector<Event> events = kPbtEvents;
  events[0] = validation(0, 10, -INFINITY);
  events[6] = failed(3);
  events.erase(events.begin() + 7);  // closed(3)
  expect_restores_identically(pbt_study(), events);
  expect_restores_identically(pbt_study({{"resample", 0.5}, {"perturb", {0.8, 1.2}}}), kPbtEvents);
}

TEST(Pbt, OptionErrors) {
  EXPECT_EQ(spec_error(pbt_study({{"population", 1}})),
            "searcher.population: expected an integer in [2, 1000000], got 1");
  json no_interval = pbt_study();
  no_interval["searcher"].erase("interval");
  EXPECT_EQ(spec_error(no_interval), "searcher.interval: missing");
  EXPECT_EQ(spec_error(pbt_study({{"fraction", 0.6}})),
            "searcher.fraction: expected a number in (0, 0.5], got 0.6");
  EXPECT_EQ(spec_error(pbt_study({{"perturb", json::array()}})),
            "searcher.perturb: expected at least 1 element, got []");
  EXPECT_EQ(spec_error(pbt_study({{"perturb", {1.2, -1}}})),
            "searcher.perturb[1]: expected a factor > 0, got -1");
  EXPECT_EQ(spec_error(pbt_study({{"resample", 2}})),
            "searcher.resample: expected a number in [0, 1], got 2");
  EXPECT_EQ(spec_error(pbt_study({{"max_trials", 8}})).rfind("searcher.max_trials: pbt creates", 0),
            0u);
  json schedule = pbt_study();
  schedule["hyperparameters"]["lr"] = {{"schedule", "step_decay"},
                                       {"init", {{"uniform", {0.01, 0.1}}}},
                                       {"every", 1},
                                       {"gamma", 0.5}};
  EXPECT_EQ(
      spec_error(schedule).rfind("hyperparameters.lr: pbt needs a constant or a distribution", 0),
      0u);
  json epochs = pbt_study({{"interval", {{"epochs", 1}}}});
  EXPECT_EQ(spec_error(epochs).rfind("hyperparameters.batch_size: pbt holds its members", 0), 0u);
}

// ---------------------------------------------------------------------------------------------
// tpe

json tpe_study(json hyperparameters, json options = json::object()) {
  json searcher = {{"name", "tpe"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 40}};
  searcher.update(options);
  return study(std::move(hyperparameters), searcher);
}

// Runs a TPE study to its Finish, trials reporting and closing in creation order, the loss at
// step 40 being f(params); returns every trial's params.
template <typename F>
std::vector<Params> run_tpe(const json& spec_json, F f) {
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(spec_json));
  std::vector<Params> proposals;
  Ops ops = s->on_study_start();
  for (size_t next = 0; ops.empty() || !std::holds_alternative<Finish>(ops.back()); ++next) {
    for (const Operation& op : ops)
      if (const Create* c = std::get_if<Create>(&op)) proposals.push_back(c->params);
    if (next == proposals.size()) break;  // nothing left to close, and no Finish
    EXPECT_TRUE(s->on_validation(next, 40, f(proposals[next])).empty());
    ops = s->on_trial_closed(next);
  }
  return proposals;
}

double median_distance(const std::vector<Params>& ps, size_t from, size_t to, double optimum) {
  std::vector<double> d;
  for (size_t i = from; i < to; ++i) d.push_back(std::fabs(ps[i]["lr"].get<double>() - optimum));
  std::sort(d.begin(), d.end());
  return d[d.size() / 2];
}

TEST(Tpe, ProposalsConcentrateNearTheOptimum) {
  // loss = (lr - 0.7)^2 on [0, 1]: the ten startup trials are seeded draws, the last ten cluster
  // (loosely: Optuna's good set, a tenth of the trials, keeps exploring) and the model's best is
  // close.
  json j = tpe_study({{"lr", {{"uniform", {0.0, 1.0}}}}}, {{"parallel", 1}});
  auto loss = [](const Params& p) { return std::pow(p["lr"].get<double>() - 0.7, 2); };
  std::vector<Params> ps = run_tpe(j, loss);
  ASSERT_EQ(ps.size(), 40u);
  StudySpec spec = parse_spec(j);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(ps[i], spec.space.draw(7, i, std::nullopt));
  double startup = median_distance(ps, 0, 10, 0.7), last = median_distance(ps, 30, 40, 0.7);
  EXPECT_LT(last, startup * 0.75) << "startup " << startup << ", last ten " << last;
  double closest = 1;
  for (size_t i = 10; i < 40; ++i)
    closest = std::min(closest, std::fabs(ps[i]["lr"].get<double>() - 0.7));
  EXPECT_LT(closest, 0.01);
  EXPECT_EQ(run_tpe(j, loss), ps);  // deterministic
}

TEST(Tpe, EveryKindOfLeafIncludingScheduleFields) {
  json hyper = {{"lr",
                 {{"schedule", "multistep"},
                  {"init", {{"loguniform", {0.001, 0.1}}}},
                  {"milestones", {{{"int", {1, 3}}}}},
                  {"gamma", {{"grid", {0.1, 0.5}}}}}},
                {"momentum", {{"choice", {0.0, 0.9}}}}};
  json j = tpe_study(hyper, {{"n_startup", 3}, {"candidates", 8}});
  StudySpec spec = parse_spec(j);
  // The best trials have small lr.init, momentum 0.9 and gamma 0.5.
  auto loss = [](const Params& p) {
    return std::log(p["lr.init"].get<double>()) + (p["momentum"] == 0.9 ? 0 : 3) +
           (p["lr.gamma"] == 0.5 ? 0 : 3);
  };
  std::vector<Params> ps = run_tpe(j, loss);
  ASSERT_EQ(ps.size(), 40u);
  int good = 0;
  for (const Params& p : ps) {
    for (const Param& leaf : spec.space.params()) EXPECT_TRUE(leaf.admits(p[leaf.name])) << p;
    EXPECT_NO_THROW(spec.hyperparams(p));
    good += p["momentum"] == 0.9 && p["lr.gamma"] == 0.5;
  }
  EXPECT_GT(good, 20);
}

TEST(Tpe, SaveAndLoadContinueIdentically) {
  json j = tpe_study({{"lr", {{"uniform", {0.0, 1.0}}}}, {"momentum", {{"choice", {0.0, 0.9}}}}},
                     {{"max_trials", 10}, {"n_startup", 2}});
  std::vector<Event> events;
  // Two in flight: trials close out of order, one fails, one has no value.
  for (RequestId t : {1, 0, 3, 2, 4, 6, 5, 7, 9, 8}) {
    if (t == 4) {
      events.push_back(failed(t));
      continue;
    }
    if (t != 6) events.push_back(validation(t, 40, 0.1 * double((t * 7) % 10)));
    events.push_back(closed(t));
  }
  expect_restores_identically(j, events);
}

TEST(Tpe, OptionErrors) {
  json hyper = {{"lr", {{"uniform", {0.0, 1.0}}}}};
  json no_max = tpe_study(hyper);
  no_max["searcher"].erase("max_trials");
  EXPECT_EQ(spec_error(no_max), "searcher.max_trials: missing (tpe needs it)");
  EXPECT_EQ(spec_error(tpe_study(hyper, {{"gamma", 1}})),
            "searcher.gamma: expected a number in (0, 1), got 1");
  EXPECT_EQ(spec_error(tpe_study(hyper, {{"candidates", 0}})),
            "searcher.candidates: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(spec_error(tpe_study(hyper, {{"n_startup", -1}})),
            "searcher.n_startup: expected an integer in [0, 1000000], got -1");
}

}  // namespace
}  // namespace hippo
