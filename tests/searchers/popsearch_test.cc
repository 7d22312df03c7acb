// median_stop, pbt and tpe: decisions against hand-computed expectations for fixed metric values,
// save/load round trips that continue identically, and option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "searchers/sampler.h"
#include "searchers/searcher.h"
#include "searchers/sobol.h"
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

// Optuna's PercentilePruner's options and PatientPruner around it.
struct Pruner {
  double percentile = 50;
  int64_t interval_steps = 1;
  std::optional<int64_t> patience;
};

// The best of values (NaN skipped; NaN when there is none), as np.nanmax / np.nanmin.
template <typename It>
double nan_best(It from, It to, bool maximize) {
  double best = NAN;
  for (It it = from; it != to; ++it)
    if (double v = it->second;
        !std::isnan(v) && (std::isnan(best) || (maximize ? v > best : v < best)))
      best = v;
  return best;
}

bool optuna_prunes(const History& h, RequestId trial, int64_t step, bool maximize,
                   int64_t n_startup_trials, int64_t n_warmup_steps, const Pruner& o = {}) {
  const std::map<int64_t, double>& values = h.values.at(trial);
  if (o.patience) {  // PatientPruner: only a trial whose last patience + 1 values did not improve
    if (values.size() <= static_cast<size_t>(*o.patience) + 1) return false;
    auto cut = std::prev(values.end(), *o.patience + 1);
    double before = nan_best(values.begin(), cut, maximize);
    double after = nan_best(cut, values.end(), maximize);
    if (!(maximize ? before > after : before < after)) return false;
  }
  if (h.completed.empty() || static_cast<int64_t>(h.completed.size()) < n_startup_trials)
    return false;
  if (step < n_warmup_steps) return false;
  // _is_first_in_interval_step
  int64_t nearest = (step - n_warmup_steps) / o.interval_steps * o.interval_steps + n_warmup_steps;
  int64_t second_last = values.size() > 1 ? std::prev(values.end(), 2)->first : -1;
  if (second_last >= nearest) return false;
  double best = nan_best(values.begin(), values.end(), maximize);
  if (std::isnan(best)) return true;
  std::vector<double> at_step;  // np.nanpercentile: NaN dropped, linear interpolation
  for (RequestId t : h.completed) {
    auto it = h.values.at(t).find(step);
    if (it != h.values.at(t).end() && !std::isnan(it->second)) at_step.push_back(it->second);
  }
  if (at_step.empty()) return false;
  std::sort(at_step.begin(), at_step.end());
  double q = maximize ? 100 - o.percentile : o.percentile;
  double position = q / 100 * double(at_step.size() - 1);
  size_t below = static_cast<size_t>(position);
  double a = at_step[below], b = at_step[std::min(below + 1, at_step.size() - 1)];
  double t = position - double(below);
  double p = t >= 0.5 ? b - (1 - t) * (b - a) : a + t * (b - a);  // numpy's _lerp
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
      if (std::isnan(value)) {
        // The trial diverged: the master feeds the worst value of the mode and closes it. In
        // Optuna its objective returns NaN: the trial is FAIL, never completed.
        s->on_validation(t, step, maximize ? -INFINITY : INFINITY);
        running.erase(running.begin() + static_cast<ptrdiff_t>(pick));
        apply(s->on_trial_closed(t));
        continue;
      }
      // Judged as Optuna would, except the last step (trained already: nothing left to save).
      bool expected = step < 40 && optuna_prunes(h, t, step, maximize, min_trials, 11);
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

// Issue 46's counterexample (evaluations at 10/20/30/40 here): trial 1 diverges at 20 (the master
// feeds it the worst value of the mode, then closes it). It never completed, so with min_trials 2
// trial 2 is not judged at 30; had trial 1 completed (0.5, 0.05, 0.6, 0.65), the median there
// (0.7) stops trial 2.
TEST(MedianStop, ADivergedTrialIsAFailureNotACompletion) {
  for (bool diverges : {true, false}) {
    std::unique_ptr<Searcher> s =
        make_searcher(parse_spec(median_study({{"parallel", 1}, {"min_trials", 2}})));
    s->on_study_start();
    for (auto [step, value] :
         std::map<int64_t, double>{{10, 0.6}, {20, 0.7}, {30, 0.8}, {40, 0.85}})
      s->on_validation(0, step, value);
    s->on_trial_closed(0);
    s->on_validation(1, 10, 0.5);
    if (diverges) {
      s->on_validation(1, 20, -INFINITY);
    } else {
      for (auto [step, value] : std::map<int64_t, double>{{20, 0.05}, {30, 0.6}, {40, 0.65}})
        s->on_validation(1, step, value);
    }
    s->on_trial_closed(1);
    s->on_validation(2, 10, 0.3);
    s->on_validation(2, 20, 0.4);
    EXPECT_EQ(s->on_validation(2, 30, 0.45).empty(), diverges);
  }
}

// percentile, interval and patience on random histories (no NaN: the master never sends one),
// each decision against Optuna's PercentilePruner (and PatientPruner around it) written from
// their source over what the test saw happen. Eight evaluations, every 10 steps.
TEST(MedianStop, PruningOptionsDecideAsOptunasPrunersOnRandomHistories) {
  int64_t judged = 0, stops = 0;
  const Steps evals = {10, 20, 30, 40, 50, 60, 70, 80};
  for (uint64_t seed = 0; seed < 150; ++seed) {
    std::mt19937_64 random(seed);
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(random);
    };
    const bool maximize = uniform(0, 1);
    Pruner o;
    o.percentile = double(uniform(0, 4)) * 25;
    o.interval_steps = uniform(0, 1) ? 1 : 10 * uniform(1, 3);
    if (uniform(0, 1)) o.patience = uniform(0, 3);
    const int64_t min_trials = uniform(1, 4);
    json options = {{"max_trials", uniform(4, 16)}, {"parallel", uniform(1, 4)},
                    {"min_trials", min_trials},     {"mode", maximize ? "max" : "min"},
                    {"percentile", o.percentile},   {"interval", {{"steps", o.interval_steps}}}};
    if (o.patience) options["patience"] = *o.patience;
    json j = median_study(options);
    j["hyperparameters"]["lr"] = {{"uniform", {0.01, 1.0}}};
    j["length"] = {{"steps", 80}};
    std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
    History h;
    std::vector<RequestId> running;
    std::map<RequestId, size_t> reported;
    auto apply = [&](const Ops& ops) {
      for (const Operation& op : ops)
        if (const Create* c = std::get_if<Create>(&op)) running.push_back(c->trial);
    };
    apply(s->on_study_start());
    while (!running.empty()) {
      size_t pick = static_cast<size_t>(uniform(0, int64_t(running.size()) - 1));
      RequestId t = running[pick];
      int64_t step = evals[reported[t]++];
      double value = std::uniform_real_distribution<>(0, 1)(random);
      h.values[t][step] = value;
      bool expected = step < 80 && optuna_prunes(h, t, step, maximize, min_trials, 11, o);
      Ops ops = s->on_validation(t, step, value);
      bool stopped = !ops.empty() && ops.front() == Operation(Stop{t});
      ASSERT_EQ(stopped, expected)
          << "seed " << seed << ", trial " << t << ", step " << step << ", options " << options;
      judged += step < 80;
      stops += stopped;
      if (stopped || step == 80) {
        running.erase(running.begin() + static_cast<ptrdiff_t>(pick));
        if (!stopped) {
          h.completed.insert(t);
          ops = s->on_trial_closed(t);
        }
        apply(ops);
      }
    }
  }
  EXPECT_GT(judged, 3000);
  EXPECT_GT(stops, 200);
}

// threshold stops a trial outside its bounds at a judged step, before any trial has completed;
// within the grace nothing is judged.
TEST(MedianStop, ThresholdStopsOutsideItsBounds) {
  std::unique_ptr<Searcher> s = make_searcher(
      parse_spec(median_study({{"parallel", 2}, {"threshold", {{"lower", 0.2}, {"upper", 0.9}}}})));
  s->on_study_start();
  EXPECT_TRUE(s->on_validation(0, 10, 0.1).empty());  // within the grace
  EXPECT_TRUE(s->on_validation(0, 20, 0.5).empty());
  EXPECT_EQ(s->on_validation(0, 30, 0.15).at(0), Operation(Stop{0}));
  EXPECT_TRUE(s->on_validation(1, 10, 0.5).empty());
  EXPECT_EQ(s->on_validation(1, 20, 0.95).at(0), Operation(Stop{1}));
}

TEST(MedianStop, PruningOptionsSaveAndLoadContinueIdentically) {
  expect_restores_identically(median_study({{"parallel", 2},
                                            {"min_trials", 2},
                                            {"percentile", 25},
                                            {"interval", {{"steps", 20}}},
                                            {"patience", 1},
                                            {"threshold", {{"lower", 0.05}}}}),
                              kMedianEvents);
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
  EXPECT_EQ(spec_error(median_study({{"patient", 1}})), "searcher.patient: unknown field");
  EXPECT_EQ(spec_error(median_study({{"percentile", 101}})),
            "searcher.percentile: expected a number in [0, 100], got 101");
  EXPECT_EQ(spec_error(median_study({{"patience", -1}})),
            "searcher.patience: expected an integer in [0, 1000000], got -1");
  EXPECT_EQ(spec_error(median_study({{"interval", 2}})),
            "searcher.interval: expected {\"steps\": N} or {\"epochs\": E}, got 2");
  EXPECT_EQ(spec_error(median_study({{"threshold", json::object()}})),
            "searcher.threshold: expected lower and/or upper");
  EXPECT_EQ(spec_error(median_study({{"threshold", {{"lower", 2}, {"upper", 1}}}})),
            "searcher.threshold: lower is above upper");
  EXPECT_EQ(spec_error(median_study({{"threshold", {{"low", 2}}}})),
            "searcher.threshold.low: unknown field");
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

// Population 6, q = 2: three members diverge (the master feeds each the worst value at the
// generation's end, then closes it). All three are replaced like failed members (no Stop: they
// ended), none is trained on from its diverged state, and the three others stay.
TEST(Pbt, ReplacesDivergedMembersLikeFailedOnes) {
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(pbt_study({{"population", 6}})));
  s->on_study_start();
  Ops next;
  for (RequestId t = 0; t < 6; ++t) {
    s->on_validation(t, 10, t % 2 ? -INFINITY : 0.1 * double(t + 1));
    next = s->on_trial_closed(t);
  }
  std::vector<RequestId> trained, donors;
  for (const Operation& op : next) {
    EXPECT_FALSE(std::holds_alternative<Stop>(op));
    if (const Create* c = std::get_if<Create>(&op)) donors.push_back(c->fork->donor);
    if (const Train* t = std::get_if<Train>(&op)) trained.push_back(t->trial);
  }
  EXPECT_EQ(trained, (std::vector<RequestId>{0, 2, 4, 6, 7, 8}));
  for (RequestId d : donors) EXPECT_TRUE(d == 4 || d == 2) << d;  // the best two alive
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

// ---------------------------------------------------------------------------------------------
// cmaes

// Four uniform leaves on [0, 1]; the loss at step 40 is f(params).
json bowl_study(json options = json::object()) {
  json searcher = {{"name", "cmaes"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 160}};
  searcher.update(options);
  json j = study({{"lr", {{"uniform", {0.0, 1.0}}}},
                  {"momentum", {{"uniform", {0.0, 1.0}}}},
                  {"weight_decay", {{"uniform", {0.0, 1.0}}}},
                  {"beta1", {{"uniform", {0.0, 0.9}}}}},
                 searcher);
  return j;
}

double bowl(const Params& p) {
  return std::pow(p["lr"].get<double>() - 0.3, 2) + std::pow(p["momentum"].get<double>() - 0.8, 2) +
         std::pow(p["weight_decay"].get<double>() - 0.55, 2) +
         std::pow(p["beta1"].get<double>() - 0.2, 2);
}

double best_of(const std::vector<Params>& ps, size_t from, size_t to) {
  double best = INFINITY;
  for (size_t i = from; i < to; ++i) best = std::min(best, bowl(ps[i]));
  return best;
}

// CMA-ES on a 4-D bowl: its best trial is far closer than random search's with the same budget
// (4.6e-4 against 3.7e-2),
// and its last generation has gathered around the optimum (the steps shrank).
TEST(Cmaes, ConvergesOnA4DBowl) {
  json j = bowl_study({{"parallel", 1}});
  std::vector<Params> cma = run_tpe(j, bowl);  // trials close in creation order
  ASSERT_EQ(cma.size(), 160u);
  json r = j;
  r["searcher"] = {{"name", "random"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 160}};
  std::vector<Params> random = run_tpe(r, bowl);
  const double cma_best = best_of(cma, 0, 160), random_best = best_of(random, 0, 160);
  std::printf("best of 160: cmaes %.2e, random %.2e\n", cma_best, random_best);
  EXPECT_LT(cma_best, 1e-3);
  EXPECT_LT(cma_best, random_best / 20);
  double worst_last = 0;  // of the last generation (population 4 + floor(3 ln 4) = 8)
  for (size_t i = 152; i < 160; ++i) worst_last = std::max(worst_last, bowl(cma[i]));
  EXPECT_LT(worst_last, 1e-2);
  EXPECT_EQ(run_tpe(j, bowl), cma);  // deterministic
}

TEST(Cmaes, SaveAndLoadContinueIdentically) {
  json j = bowl_study({{"max_trials", 24}, {"population", 4}});
  std::vector<Event> events;
  // Two in flight: trials close out of order, one fails, one diverges, one has no value; the
  // generations turn over in between.
  for (RequestId t : {1, 0, 3, 2, 4, 6, 5, 7, 9, 8, 10, 11, 13, 12, 15, 14, 16, 17, 19, 18}) {
    if (t == 4) {
      events.push_back(failed(t));
      continue;
    }
    if (t != 6) events.push_back(validation(t, 40, t == 9 ? INFINITY : 0.1 * double((t * 7) % 10)));
    events.push_back(closed(t));
  }
  expect_restores_identically(j, events);
}

TEST(Cmaes, OptionErrors) {
  json no_max = bowl_study();
  no_max["searcher"].erase("max_trials");
  EXPECT_EQ(spec_error(no_max), "searcher.max_trials: missing (cmaes needs it)");
  EXPECT_EQ(spec_error(bowl_study({{"population", 1}})),
            "searcher.population: expected an integer in [2, 100000], got 1");
  EXPECT_EQ(spec_error(bowl_study({{"sigma0", 0}})),
            "searcher.sigma0: expected a number in (0, 1] (of the range), got 0");
  json choice = bowl_study();
  choice["hyperparameters"]["momentum"] = {{"choice", {0.5, 0.9}}};
  EXPECT_EQ(spec_error(choice).rfind("hyperparameters.momentum: cmaes searches uniform", 0), 0u)
      << spec_error(choice);
}

// ---------------------------------------------------------------------------------------------
// sobol, grid's random order

// Joe and Kuo's own program prints these first points in three dimensions (unscrambled).
TEST(Sobol, UnscrambledPointsAreJoeAndKuos) {
  const std::vector<std::vector<double>> expected = {{0, 0, 0},
                                                     {0.5, 0.5, 0.5},
                                                     {0.75, 0.25, 0.25},
                                                     {0.25, 0.75, 0.75},
                                                     {0.375, 0.375, 0.625},
                                                     {0.875, 0.875, 0.125},
                                                     {0.625, 0.125, 0.875},
                                                     {0.125, 0.625, 0.375},
                                                     {0.1875, 0.3125, 0.9375},
                                                     {0.6875, 0.8125, 0.4375}};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(sobol_point(i, 3, std::nullopt), expected[i]) << i;
}

// Point 200 in all 21 dimensions, as Joe and Kuo's program (transcribed from their notes, in
// Python, with the same table) gives it: the recurrence of every dimension's direction numbers.
TEST(Sobol, EveryDimensionIsJoeAndKuos) {
  const std::vector<double> expected = {
      0.20703125, 0.38671875, 0.41015625, 0.58984375, 0.81640625, 0.55859375, 0.02734375,
      0.97265625, 0.33203125, 0.62109375, 0.99609375, 0.58984375, 0.30859375, 0.58984375,
      0.09765625, 0.69140625, 0.63671875, 0.84765625, 0.74609375, 0.17578125, 0.36328125};
  EXPECT_EQ(sobol_point(200, kSobolDims, std::nullopt), expected);
}

// Scrambled or not, the first 2^m points of each of the 21 dimensions put one point in each of
// the 2^m intervals of [0, 1) (a (0, m, 1)-net), and the first 256 points of two dimensions put 16
// in each cell of a 4 x 4 grid (every pair but dimensions 15 and 19, counted from 1, whose
// t-value for 2^8 points is above 4: the same table in Joe and Kuo's program leaves half the
// cells empty there too); seeds scramble differently.
TEST(Sobol, ScrambledPointsAreEvenAndSeeded) {
  for (std::optional<uint64_t> seed : {std::optional<uint64_t>(), std::optional<uint64_t>(7)}) {
    std::vector<std::vector<double>> points;
    for (uint64_t i = 0; i < 256; ++i) points.push_back(sobol_point(i, kSobolDims, seed));
    for (size_t d = 0; d < kSobolDims; ++d) {
      std::set<int> cells;
      for (const auto& p : points) cells.insert(int(p[d] * 256));
      EXPECT_EQ(cells.size(), 256u) << "dimension " << d;
      for (size_t e = 0; e < d; ++e) {
        std::map<int, int> grid;
        for (const auto& p : points) ++grid[int(p[d] * 4) * 4 + int(p[e] * 4)];
        EXPECT_EQ(grid.size(), d == 18 && e == 14 ? 8u : 16u) << d << ", " << e;
      }
    }
  }
  EXPECT_NE(sobol_point(3, 4, 7), sobol_point(3, 4, 8));
  EXPECT_EQ(sobol_point(3, 4, 7), sobol_point(3, 4, 7));
  EXPECT_THROW(sobol_point(0, kSobolDims + 1, 7), std::invalid_argument);
}

TEST(Sobol, TrialsAreThePointsOfTheSequence) {
  json j = study({{"lr", {{"loguniform", {0.001, 1.0}}}},
                  {"momentum", {{"choice", {0.5, 0.9, 0.99}}}},
                  {"batch_size", {{"int", {16, 64}}}}},
                 {{"name", "sobol"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 300}});
  j["fixed"].erase("batch_size");
  j["length"] = {{"steps", 40}};
  StudySpec spec = parse_spec(j);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Ops ops = s->on_study_start();
  ASSERT_EQ(ops.size(), 2 * kTrialBatch);
  for (uint64_t i = 0; i < kTrialBatch; ++i)
    EXPECT_EQ(std::get<Create>(ops[2 * i]).params,
              spec.space.at(sobol_point(i, 3, 7), std::nullopt));
  EXPECT_EQ(s->most_trials(), 300u);
  std::vector<Event> events;
  for (RequestId t = 0; t < 256; t += 7) events.push_back(closed(t));  // the first batch
  expect_restores_identically(j, events);
  json wide = j;  // an external model takes hyper-parameters of any name
  wide["model"] = {{"type", "external"}, {"command", {"/bin/true"}}};
  wide["data"] = {{"name", "any"}};
  for (int i = 0; i < 20; ++i)
    wide["hyperparameters"]["beta" + std::to_string(i)] = {{"uniform", {0.1, 0.9}}};
  EXPECT_EQ(spec_error(wide).rfind("searcher.name: sobol covers at most 21 leaves", 0), 0u)
      << spec_error(wide);
}

TEST(GridOrder, RandomVisitsEveryPointOnceInASeededOrder) {
  for (uint64_t n : {1, 2, 3, 5, 16, 17, 1000}) {
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(permuted(i, n, 3));
    EXPECT_EQ(seen.size(), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  json j = median_study();  // five grid points
  j["searcher"] = {{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}, {"order", "random"}};
  j["hyperparameters"]["momentum"] = {{"grid", {0.0, 0.5, 0.9}}};
  StudySpec spec = parse_spec(j);
  Ops ops = make_searcher(spec)->on_study_start();
  ASSERT_EQ(ops.size(), 30u);
  std::set<std::string> points;
  std::vector<Params> in_order;
  for (uint64_t i = 0; i < 15; ++i) {
    points.insert(std::get<Create>(ops[2 * i]).params.dump());
    in_order.push_back(spec.space.draw(7, i, i));
  }
  EXPECT_EQ(points.size(), 15u);
  std::set<std::string> grid;
  for (const Params& p : in_order) grid.insert(p.dump());
  EXPECT_EQ(points, grid);
  EXPECT_NE(std::get<Create>(ops[0]).params, in_order[0]);  // (not the grid's order)
  j["searcher"]["max_trials"] = 4;                          // a random subset
  EXPECT_EQ(make_searcher(parse_spec(j))->on_study_start().size(), 8u);
  std::vector<Event> events;
  for (RequestId t : {3, 1, 0, 2}) events.push_back(closed(t));
  expect_restores_identically(j, events);
  j["searcher"]["order"] = "shuffled";
  EXPECT_EQ(spec_error(j), "searcher.order: expected \"grid\" or \"random\", got \"shuffled\"");
}

// ---------------------------------------------------------------------------------------------
// Samplers inside schedulers

json asha_with(json sampler, json options = json::object()) {
  json searcher = {{"name", "asha"}, {"metric", "loss"},
                   {"mode", "min"},  {"max_trials", 30},
                   {"eta", 2},       {"min_length", {{"steps", 10}}},
                   {"parallel", 1},  {"sampler", std::move(sampler)}};
  searcher.update(options);
  return study({{"lr", {{"uniform", {0.0, 1.0}}}}}, searcher);
}

// One leaf: a good set of 2 (d + 1) and a bad set of 2 more, so 4 are enough; from 27 on the good
// set is 15% (floor), as HpBandSter's n_good.
TEST(Sampler, BohbTakesTheHighestLevelWithEnoughObservations) {
  StudySpec spec = parse_spec(asha_with({{"name", "tpe"}}));
  Params p = {{"lr", 0.5}};
  auto at = [&](int n) { return std::vector<SampledTrial>(n, SampledTrial{0, &p, 1.0}); };
  EXPECT_EQ(bohb_observations(spec, {{10, at(5)}, {20, at(4)}, {40, at(3)}}).size(), 4u);
  EXPECT_EQ(bohb_observations(spec, {{10, at(5)}, {20, at(3)}, {40, at(1)}}).size(), 5u);
  EXPECT_TRUE(bohb_observations(spec, {{10, at(3)}, {20, at(2)}}).empty());
  EXPECT_EQ(bohb_good_count(1, 4), 2u);
  EXPECT_EQ(bohb_good_count(1, 26), 3u);
  EXPECT_EQ(bohb_good_count(5, 100), 15u);
  EXPECT_EQ(bohb_good_count(5, 39), 6u);
}

// BOHB's random fraction: with 1 every proposal is the seeded draw of its index, with 0 (tpe
// alone's default) none past the startup is, and the default inside a scheduler is a third.
TEST(Sampler, TpeInsideASchedulerDrawsBohbsRandomFractionAtRandom) {
  StudySpec spec = parse_spec(asha_with({{"name", "tpe"}, {"n_startup", 0}}));
  std::vector<Params> params;
  for (int i = 0; i < 8; ++i) params.push_back({{"lr", 0.1 * (i + 1)}});
  SamplerView view;
  for (int i = 0; i < 8; ++i) view.observed.push_back({i, &params[i], 0.1 * i});
  auto sampler = [&](json options, SamplerUse use) {
    options["name"] = "tpe";
    options["n_startup"] = 0;
    return make_sampler(spec, "tpe", Field(options, "sampler"), 30, use);
  };
  auto always = sampler({{"random_fraction", 1.0}}, SamplerUse::kInScheduler);
  auto never = sampler(json::object(), SamplerUse::kAlone);
  auto bohb = sampler(json::object(), SamplerUse::kInScheduler);
  int drawn = 0, never_drawn = 0;
  for (uint64_t index = 0; index < 300; ++index) {
    Params draw = spec.space.draw(spec.seed, index, std::nullopt);
    EXPECT_EQ(always->propose(index, view), draw);
    never_drawn += never->propose(index, view) == draw;
    drawn += bohb->propose(index, view) == draw;
  }
  EXPECT_EQ(never_drawn, 0);
  EXPECT_GT(drawn, 70);
  EXPECT_LT(drawn, 130);
  EXPECT_THROW(sampler({{"random_fraction", 1.5}}, SamplerUse::kInScheduler), SpecError);
}

// asha with tpe, one trial at a time, the loss at a rung (lr - 0.8)^2 at the first rung and
// (lr - 0.2)^2 above it: every trial the searcher creates has the values that tpe proposes from
// the observations at the highest rung length where at least two trials (one leaf + 1) finished
// with a value, computed here from the events alone; later proposals come from the upper rungs,
// where they differ from what the first rung's observations would give.
TEST(Sampler, AshaProposesFromTheHighestRungWithEnoughObservations) {
  json j = asha_with({{"name", "tpe"}, {"n_startup", 3}});
  StudySpec spec = parse_spec(j);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  const json sampler_options = j["searcher"]["sampler"];
  std::map<RequestId, Params> params;
  std::map<RequestId, std::map<int64_t, double>> finished;  // trial -> rung length -> value
  std::vector<std::pair<RequestId, int64_t>> pending;       // Train{trial, length}
  int upper = 0, differs = 0;
  auto apply = [&](const Ops& ops) {
    for (const Operation& op : ops) {
      if (const Create* c = std::get_if<Create>(&op)) {
        std::map<int64_t, std::vector<SampledTrial>> by_length;
        for (const auto& [trial, values] : finished)
          for (const auto& [length, value] : values)
            by_length[length].push_back({trial, &params.at(trial), value});
        SamplerView view{bohb_observations(spec, by_length), {}};
        auto fresh = make_sampler(spec, "tpe", Field(sampler_options, "sampler"), 30,
                                  SamplerUse::kInScheduler);
        EXPECT_EQ(c->params, fresh->propose(uint64_t(c->trial), view)) << "trial " << c->trial;
        if (c->trial >= 3 && !view.observed.empty() && by_length.rbegin()->first > 10 &&
            view.observed.size() != by_length.begin()->second.size()) {
          ++upper;
          SamplerView lowest{by_length.begin()->second, {}};
          differs += fresh->propose(uint64_t(c->trial), lowest) != c->params;
        }
        params[c->trial] = c->params;
      }
      if (const Train* t = std::get_if<Train>(&op)) pending.push_back({t->trial, t->length});
    }
  };
  apply(s->on_study_start());
  while (!pending.empty()) {
    auto [trial, length] = pending.front();
    pending.erase(pending.begin());
    const double x = params.at(trial)["lr"].get<double>(), target = length == 10 ? 0.8 : 0.2;
    const double loss = (x - target) * (x - target);
    s->on_validation(trial, length, loss);
    finished[trial][length] = loss;
    apply(s->on_trial_closed(trial));
  }
  EXPECT_EQ(params.size(), 30u);
  EXPECT_GT(upper, 5);
  EXPECT_GT(differs, 0);
}

// hyperband with a model draws a bracket once the one before has finished its first rung; with
// sobol (no model) every bracket starts at once, its trials the sequence's points.
TEST(Sampler, HyperbandWithAModelStartsBracketsInTurn) {
  json j = study({{"lr", {{"uniform", {0.0, 1.0}}}}},
                 {{"name", "hyperband"},
                  {"metric", "loss"},
                  {"mode", "min"},
                  {"eta", 2},
                  {"min_length", {{"steps", 10}}},
                  {"sampler", {{"name", "tpe"}, {"n_startup", 2}}}});
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  auto creates = [](const Ops& ops) {
    return std::count_if(ops.begin(), ops.end(),
                         [](const Operation& op) { return std::holds_alternative<Create>(op); });
  };
  // Rungs 10, 20, 40 (s_max 2): brackets of 4, 3 and 3 trials.
  Ops start = s->on_study_start();
  EXPECT_EQ(creates(start), 4);
  Ops next;
  for (RequestId t = 0; t < 4; ++t) {
    s->on_validation(t, 10, 0.1 * double(t));
    next = s->on_trial_closed(t);
  }
  EXPECT_EQ(creates(next), 3);  // bracket 1, with the promotions of bracket 0
  EXPECT_EQ(std::get<Create>(next[0]).trial, 4);
  j["searcher"]["sampler"] = {{"name", "sobol"}};
  StudySpec spec = parse_spec(j);
  Ops all = make_searcher(spec)->on_study_start();
  EXPECT_EQ(creates(all), 10);
  EXPECT_EQ(std::get<Create>(all[5]).params, spec.space.at(sobol_point(5, 1, 7), std::nullopt));
}

TEST(Sampler, SchedulersWithSamplersSaveAndLoadContinueIdentically) {
  for (json sampler :
       {json{{"name", "tpe"}, {"n_startup", 2}}, json{{"name", "gp"}, {"n_startup", 2}},
        json{{"name", "cmaes"}, {"population", 4}}, json{{"name", "sobol"}}}) {
    SCOPED_TRACE(sampler.dump());
    json j = asha_with(sampler, {{"max_trials", 12}});
    // Whatever asha asks, trial by trial: report the value at its rung and close it.
    StudySpec spec = parse_spec(j);
    std::unique_ptr<Searcher> s = make_searcher(spec);
    std::vector<std::pair<RequestId, int64_t>> pending;
    std::vector<Event> played;
    auto apply = [&](const Ops& ops) {
      for (const Operation& op : ops)
        if (const Train* t = std::get_if<Train>(&op)) pending.push_back({t->trial, t->length});
    };
    apply(s->on_study_start());
    while (!pending.empty()) {
      auto [trial, length] = pending.front();
      pending.erase(pending.begin());
      played.push_back(validation(trial, length, 0.01 * double((trial * 13 + length) % 17)));
      played.push_back(trial == 5 ? failed(trial) : closed(trial));
      for (size_t i = played.size() - 2; i < played.size(); ++i) apply(feed(*s, played[i]));
    }
    expect_restores_identically(j, played);
  }
  json median = median_study({{"parallel", 2}, {"min_trials", 2}, {"sampler", {{"name", "tpe"}}}});
  median["hyperparameters"]["lr"] = {{"uniform", {0.0, 1.0}}};
  median["searcher"]["max_trials"] = 5;
  expect_restores_identically(median, kMedianEvents);
}

TEST(Sampler, OptionErrors) {
  EXPECT_EQ(spec_error(asha_with("tpe")),
            "searcher.sampler: expected an object: {\"name\": ..., its options}");
  EXPECT_EQ(spec_error(asha_with({{"name", "anneal"}}))
                .rfind("searcher.sampler.name: unknown sampler \"anneal\" (known: cmaes, gp, "
                       "random, sobol, tpe)",
                       0),
            0u)
      << spec_error(asha_with({{"name", "anneal"}}));
  EXPECT_EQ(spec_error(asha_with({{"name", "tpe"}, {"parallel", 2}})),
            "searcher.sampler.parallel: unknown field");
  EXPECT_EQ(spec_error(asha_with({{"name", "tpe"}, {"gamma", 2}})),
            "searcher.sampler.gamma: expected a number in (0, 1), got 2");
  EXPECT_EQ(spec_error(asha_with({{"name", "gp"}}, {{"max_trials", 301}}))
                .rfind("searcher.max_trials: gp runs at most 300", 0),
            0u);
  json moasha = asha_with({{"name", "tpe"}});
  moasha["searcher"]["name"] = "moasha";
  EXPECT_EQ(spec_error(moasha), "searcher.sampler: unknown field");
}

// ---------------------------------------------------------------------------------------------
// enqueue

// The spec's enqueued configurations are the first trials, then the searcher's own: a pool
// searcher proposes from then on (tpe), a scheduler draws (asha), random and sobol continue with
// their first points; a replay after a restart keeps them.
TEST(Enqueue, GivenConfigurationsAreTheFirstTrials) {
  auto first_params = [](const json& j) {
    std::vector<Params> out;
    for (const Operation& op : make_searcher(parse_spec(j))->on_study_start())
      if (const Create* c = std::get_if<Create>(&op)) out.push_back(c->params);
    return out;
  };
  const json given = {{{"lr", 0.25}}, {{"lr", 0.75}}};
  json tpe = tpe_study({{"lr", {{"uniform", {0.0, 1.0}}}}}, {{"max_trials", 5}, {"parallel", 3}});
  tpe["enqueue"] = given;
  std::vector<Params> ps = first_params(tpe);
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[0], given[0]);
  EXPECT_EQ(ps[1], given[1]);
  EXPECT_EQ(ps[2], parse_spec(tpe).space.draw(7, 2, std::nullopt));  // a startup draw
  json asha = asha_with({{"name", "sobol"}}, {{"parallel", 3}});
  asha["searcher"].erase("sampler");
  asha["enqueue"] = given;
  ps = first_params(asha);
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[1], given[1]);
  json sobol = tpe;
  sobol["searcher"] = {{"name", "sobol"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 4}};
  ps = first_params(sobol);
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0], given[0]);
  EXPECT_EQ(ps[2], parse_spec(sobol).space.at(sobol_point(0, 1, 7), std::nullopt));
  std::vector<Event> events = {validation(0, 40, 0.3), closed(0), validation(2, 40, 0.1), closed(2),
                               validation(1, 40, 0.2), closed(1)};
  expect_restores_identically(tpe, events);
  std::vector<Event> asha_events = {validation(0, 10, 0.3), closed(0), validation(1, 10, 0.2),
                                    closed(1)};
  expect_restores_identically(asha, asha_events);
}

TEST(Enqueue, Errors) {
  json tpe = tpe_study({{"lr", {{"uniform", {0.0, 1.0}}}}}, {{"max_trials", 1}});
  tpe["enqueue"] = {{{"lr", 2}}};
  EXPECT_EQ(spec_error(tpe), "enqueue[0].lr: value 2 is not in its range");
  tpe["enqueue"] = {{{"momentum", 0.5}}};
  EXPECT_EQ(spec_error(tpe), "enqueue[0].lr: missing parameter");
  tpe["enqueue"] = {{{"lr", 0.5}}, {{"lr", 0.6}}};
  EXPECT_EQ(spec_error(tpe), "enqueue: more configurations than max_trials (1)");
  tpe["enqueue"] = json::array();
  EXPECT_EQ(spec_error(tpe), "enqueue: expected at least 1 element, got []");
  json grid = median_study();
  grid["searcher"] = {{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}};
  grid["enqueue"] = {{{"lr", 0.2}}};
  EXPECT_EQ(spec_error(grid), "enqueue: searcher grid does not take enqueued configurations");
  json median = median_study();
  median["enqueue"] = {{{"lr", 0.2}}};
  EXPECT_EQ(spec_error(median), "enqueue: median_stop over a grid evaluates its grid points");
}

// `hippo enqueue` (Searcher::enqueue): a configuration given while the study runs is the pool's
// next trial, before the sampler's next proposal; it waits for a free slot, is kept in the saved
// state until it is created, and counts toward max_trials.
TEST(Enqueue, WhileRunningIsTheNextTrial) {
  json tpe = tpe_study({{"lr", {{"uniform", {0.0, 1.0}}}}}, {{"max_trials", 4}, {"parallel", 2}});
  StudySpec spec = parse_spec(tpe);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  ASSERT_EQ(s->on_study_start().size(), 4u);  // trials 0 and 1 in flight
  const Params given = {{"lr", 0.125}};
  EXPECT_TRUE(s->enqueue(given).empty());  // no free slot: it waits
  EXPECT_EQ(s->save()["queued"], json::array({given}));
  std::unique_ptr<Searcher> restored = make_searcher(spec);
  restored->load(json::parse(s->save().dump()));
  EXPECT_EQ(restored->save(), s->save());
  s->on_validation(0, 40, 0.5);
  Ops next = s->on_trial_closed(0);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0], Operation(Create{2, given, std::nullopt}));
  restored->on_validation(0, 40, 0.5);
  EXPECT_EQ(restored->on_trial_closed(0), next);
  EXPECT_FALSE(s->save().contains("queued"));  // created: in the trials now
  // A free slot: created at once.
  s->on_validation(1, 40, 0.5);
  Ops draw = s->on_trial_closed(1);
  ASSERT_EQ(draw.size(), 2u);  // trial 3, the sampler's
  // All four trials are made: nothing is left to give another one.
  try {
    s->enqueue(given);
    ADD_FAILURE() << "a fifth trial was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "all its max_trials (4) trials are created or enqueued already");
  }
  // median_stop draws as the pool does; over a grid it evaluates its grid points.
  json median = median_study({{"parallel", 1}});
  median["hyperparameters"]["lr"] = {{"uniform", {0.0, 1.0}}};
  median["searcher"]["max_trials"] = 3;
  std::unique_ptr<Searcher> m = make_searcher(parse_spec(median));
  m->on_study_start();
  EXPECT_TRUE(m->enqueue(given).empty());
  m->on_validation(0, 40, 0.5);
  EXPECT_EQ(m->on_trial_closed(0)[0], Operation(Create{1, given, std::nullopt}));
  // asha creates trials as it goes: the next one it creates (its params kept in its state, which
  // holds only draws' ids otherwise).
  json asha = asha_with({{"name", "tpe"}});
  asha["searcher"].erase("sampler");
  std::unique_ptr<Searcher> a = make_searcher(parse_spec(asha));
  a->on_study_start();
  EXPECT_TRUE(a->enqueue(given).empty());
  std::unique_ptr<Searcher> a2 = make_searcher(parse_spec(asha));
  a2->load(json::parse(a->save().dump()));
  EXPECT_EQ(a2->save(), a->save());
  for (Searcher* x : {a.get(), a2.get()}) {
    x->on_validation(0, 10, 0.5);
    Ops ops = x->on_trial_closed(0);
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops[0], Operation(Create{1, given, std::nullopt}));
  }
  EXPECT_EQ(a->save()["trials"][1]["params"], given);
  a2->load(json::parse(a->save().dump()));
  EXPECT_EQ(a2->save(), a->save());
  // The searchers that draw their trials ahead take none.
  json sha = asha_with({{"name", "tpe"}});
  sha["searcher"]["name"] = "sha";
  sha["searcher"].erase("parallel");
  for (json other :
       {median_study(), sha,
        study({{"lr", {{"uniform", {0.0, 1.0}}}}},
              {{"name", "random"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 4}})}) {
    std::unique_ptr<Searcher> x = make_searcher(parse_spec(other));
    json before = (x->on_study_start(), x->save());
    EXPECT_THROW(x->enqueue({{"lr", 0.2}}), std::invalid_argument) << other["searcher"];
    EXPECT_EQ(x->save(), before);
  }
}

// ---------------------------------------------------------------------------------------------
// warm start

// An earlier study's trials as the master stores them in the spec (master/warm_start.h): loss
// (lr - 0.8)^2 at steps 10, 20 and 40 (the study's length), over lr in [0, 1].
json with_prior(json j, int trials = 12) {
  json evaluations = json::array();
  for (int i = 0; i < trials; ++i) {
    const double lr = (i + 0.5) / trials, loss = (lr - 0.8) * (lr - 0.8);
    evaluations.push_back({{"study", "earlier"},
                           {"trial", i + 1},
                           {"params", {{"lr", lr}}},
                           {"values", {{10, loss + 0.2}, {20, loss + 0.1}, {40, loss}}}});
  }
  j["warm_start"] = {{"studies", {"earlier"}}, {"evaluations", evaluations}};
  return j;
}

Params first_proposal(const json& j) {
  for (const Operation& op : make_searcher(parse_spec(j))->on_study_start())
    if (const Create* c = std::get_if<Create>(&op)) return c->params;
  return nullptr;
}

// The earlier study's evaluations replace the startup draws (tpe, gp: they count toward
// n_startup, as Optuna counts added trials) or give cmaes its start (WS-CMA-ES): the first
// proposal differs from the same spec's without them and lies near the earlier optimum, 0.8.
// Inside asha they are observations at its rungs (BOHB's rule).
TEST(WarmStart, ChangesTheFirstProposals) {
  const json leaf = {{"lr", {{"uniform", {0.0, 1.0}}}}};
  for (const json& cold : {tpe_study(leaf, {{"n_startup", 10}, {"parallel", 1}}),
                           study(leaf, {{"name", "gp"},
                                        {"metric", "loss"},
                                        {"mode", "min"},
                                        {"max_trials", 20},
                                        {"parallel", 1}}),
                           study(leaf, {{"name", "cmaes"},
                                        {"metric", "loss"},
                                        {"mode", "min"},
                                        {"max_trials", 20},
                                        {"parallel", 1}}),
                           asha_with({{"name", "tpe"}, {"n_startup", 10}})}) {
    const Params a = first_proposal(cold), b = first_proposal(with_prior(cold));
    EXPECT_NE(a, b) << cold["searcher"];
    EXPECT_LT(std::fabs(b["lr"].get<double>() - 0.8), 0.15) << cold["searcher"] << b;
  }
  // Fewer earlier trials than n_startup: the startup draws that remain come first.
  json tpe = tpe_study(leaf, {{"n_startup", 10}, {"parallel", 3}});
  std::vector<Params> ps;
  for (const Operation& op : make_searcher(parse_spec(with_prior(tpe, 8)))->on_study_start())
    if (const Create* c = std::get_if<Create>(&op)) ps.push_back(c->params);
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[0], parse_spec(tpe).space.draw(7, 0, std::nullopt));
  EXPECT_EQ(ps[1], parse_spec(tpe).space.draw(7, 1, std::nullopt));
  EXPECT_NE(ps[2], parse_spec(tpe).space.draw(7, 2, std::nullopt));
}

TEST(WarmStart, SaveAndLoadContinueIdentically) {
  const json leaf = {{"lr", {{"uniform", {0.0, 1.0}}}}};
  const std::vector<Event> events = {
      validation(0, 40, 0.3), closed(0), validation(1, 40, 0.2), closed(1),
      validation(2, 40, 0.1), closed(2), validation(3, 40, 0.4), closed(3)};
  expect_restores_identically(with_prior(tpe_study(leaf, {{"n_startup", 4}, {"parallel", 2}})),
                              events);
  expect_restores_identically(with_prior(study(leaf, {{"name", "cmaes"},
                                                      {"metric", "loss"},
                                                      {"mode", "min"},
                                                      {"max_trials", 20},
                                                      {"parallel", 2},
                                                      {"population", 2}})),
                              events);
  const std::vector<Event> asha_events = {validation(0, 10, 0.3), closed(0),
                                          validation(1, 10, 0.2), closed(1),
                                          validation(1, 20, 0.1), closed(1)};
  expect_restores_identically(with_prior(asha_with({{"name", "tpe"}, {"n_startup", 1}})),
                              asha_events);
  json median = median_study({{"parallel", 2},
                              {"min_trials", 1},
                              {"max_trials", 6},
                              {"sampler", {{"name", "tpe"}, {"n_startup", 2}}}});
  median["hyperparameters"] = leaf;
  median["searcher"]["mode"] = "min";
  median["searcher"]["metric"] = "loss";
  expect_restores_identically(with_prior(median), kMedianEvents);
}

TEST(WarmStart, Errors) {
  const json leaf = {{"lr", {{"uniform", {0.0, 1.0}}}}};
  json tpe = tpe_study(leaf);
  auto warm = [](json j, json warm_start) {
    j["warm_start"] = std::move(warm_start);
    return j;
  };
  EXPECT_EQ(spec_error(warm(tpe, {{"studies", {"a"}}})), "accepted");
  EXPECT_EQ(spec_error(warm(tpe, {{"studies", json::array()}})),
            "warm_start.studies: expected at least 1 element, got []");
  EXPECT_EQ(spec_error(warm(tpe, {{"studies", {"a", "a"}}})),
            "warm_start.studies[1]: \"a\" is named twice");
  EXPECT_EQ(spec_error(warm(tpe, {{"studies", {"popsearch"}}})),
            "warm_start.studies[0]: \"popsearch\" is this study itself");
  EXPECT_EQ(spec_error(warm(tpe, {{"study", {"a"}}})), "warm_start.study: unknown field");
  json outside = with_prior(tpe);
  outside["warm_start"]["evaluations"][3]["params"]["lr"] = 1.5;
  EXPECT_EQ(spec_error(outside),
            "warm_start.evaluations[3].params.lr: value 1.5 is not in its range");
  json other = with_prior(tpe);
  other["warm_start"]["evaluations"][0]["study"] = "b";
  EXPECT_EQ(spec_error(other),
            "warm_start.evaluations[0].study: \"b\" is not one of warm_start.studies");
  // Searchers that learn nothing from evaluations.
  const std::string learns_nothing =
      " learns nothing from evaluations, so earlier ones cannot seed it: a warm start seeds tpe, "
      "gp and cmaes, alone or as the sampler of asha, sha, hyperband or median_stop "
      "(\"sampler\": {\"name\": \"tpe\"})";
  json random = tpe;
  random["searcher"] = {{"name", "random"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 4}};
  EXPECT_EQ(spec_error(warm(random, {{"studies", {"a"}}})),
            "warm_start: searcher random" + learns_nothing);
  json asha = asha_with({{"name", "sobol"}});
  EXPECT_EQ(spec_error(warm(asha, {{"studies", {"a"}}})),
            "warm_start: searcher asha" + learns_nothing);
  asha["searcher"].erase("sampler");
  EXPECT_EQ(spec_error(warm(asha, {{"studies", {"a"}}})),
            "warm_start: searcher asha" + learns_nothing);
  json two = warm(tpe, {{"studies", {"a"}}});
  two["searcher"]["objectives"] = {{{"metric", "loss"}, {"mode", "min"}},
                                   {{"metric", "accuracy"}, {"mode", "max"}}};
  two["searcher"].erase("metric");
  two["searcher"].erase("mode");
  two["searcher"]["name"] = "nsga2";
  EXPECT_EQ(spec_error(two).rfind("warm_start: a warm start seeds a searcher of one metric", 0), 0u)
      << spec_error(two);
}

}  // namespace
}  // namespace hippo
