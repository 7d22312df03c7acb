// Several objectives: pareto.h against brute force and hand values; nsga2 (selection by fronts and
// crowding, constraints, failures, a ZDT1 study, determinism, save/load, options); moasha (with one
// objective it is asha, operation for operation; with two it ranks by fronts; save/load; every
// promotion is within the first floor(count / eta) of its rung).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "searchers/pareto.h"
#include "searchers/searcher.h"
#include "stagetree/json_number.h"
#include "tests/searchers/random_master.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using nlohmann::json;
using testing::describe;
using testing::RandomMaster;
using testing::spec_error;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// pareto.h

// Domination written out on its own: feasible first, then the smaller violation, then values.
bool brute_dominates(const ParetoPoint& a, const ParetoPoint& b, const Directions& d) {
  if ((a.violation == 0) != (b.violation == 0)) return a.violation == 0;
  if (a.violation > 0) return a.violation < b.violation;
  bool strictly = false;
  for (size_t i = 0; i < d.size(); ++i) {
    const double x = d[i] ? a.values[i] : -a.values[i], y = d[i] ? b.values[i] : -b.values[i];
    if (x < y) return false;
    strictly = strictly || x > y;
  }
  return strictly;
}

// Front k: the points that no point outside fronts 0 .. k-1 dominates.
std::vector<std::vector<size_t>> brute_fronts(const std::vector<ParetoPoint>& p,
                                              const Directions& d) {
  std::vector<std::vector<size_t>> fronts;
  std::vector<bool> placed(p.size(), false);
  for (size_t left = p.size(); left > 0;) {
    std::vector<size_t> front;
    for (size_t i = 0; i < p.size(); ++i) {
      bool dominated = placed[i];
      for (size_t j = 0; j < p.size() && !dominated; ++j)
        dominated = !placed[j] && brute_dominates(p[j], p[i], d);
      if (!dominated) front.push_back(i);
    }
    for (size_t i : front) placed[i] = true;
    left -= front.size();
    fronts.push_back(front);
  }
  return fronts;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Random points with many ties (a few integer values), some infinite values and some infeasible.
std::vector<ParetoPoint> random_points(std::mt19937_64& rng, size_t n, size_t m) {
  std::vector<ParetoPoint> points(n);
  const bool coarse = rng() % 2 == 0;
  for (ParetoPoint& p : points) {
    for (size_t i = 0; i < m; ++i) {
      double v = coarse ? double(rng() % 4) : std::uniform_real_distribution<double>()(rng);
      if (rng() % 20 == 0) v = rng() % 2 ? kInf : -kInf;
      p.values.push_back(v);
    }
    if (rng() % 4 == 0) p.violation = double(1 + rng() % 3) / 2;
  }
  return points;
}

Directions random_directions(std::mt19937_64& rng, size_t m) {
  Directions d;
  for (size_t i = 0; i < m; ++i) d.push_back(rng() % 2 == 0);
  return d;
}

TEST(Pareto, NonDominatedSortAndTheFrontMatchBruteForce) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 500; ++round) {
    const size_t m = 1 + rng() % 3, n = rng() % 40;
    const Directions d = random_directions(rng, m);
    const std::vector<ParetoPoint> points = random_points(rng, n, m);
    SCOPED_TRACE("round " + std::to_string(round));
    EXPECT_EQ(non_dominated_sort(points, d), brute_fronts(points, d));

    std::vector<size_t> front;
    for (size_t i = 0; i < n; ++i) {
      if (points[i].violation > 0 || !all_finite(points[i].values)) continue;
      bool dominated = false;
      for (size_t j = 0; j < n; ++j)
        dominated = dominated || (points[j].violation == 0 && all_finite(points[j].values) &&
                                  brute_dominates(points[j], points[i], d));
      if (!dominated) front.push_back(i);
    }
    EXPECT_EQ(pareto_front(points, d), front);
  }
}

TEST(Pareto, ConstrainedDominationPutsFeasibleFirst) {
  const Directions max_both = {true, true};
  const ParetoPoint good{{1, 1}, 0}, poor{{0, 0}, 0}, infeasible{{9, 9}, 0.5}, worse{{9, 9}, 2};
  EXPECT_TRUE(constrained_dominates(good, poor, max_both));
  EXPECT_TRUE(constrained_dominates(poor, infeasible, max_both));
  EXPECT_FALSE(constrained_dominates(infeasible, poor, max_both));
  EXPECT_TRUE(constrained_dominates(infeasible, worse, max_both));
  EXPECT_FALSE(constrained_dominates(good, good, max_both));
}

TEST(Pareto, CrowdingDistanceByHand) {
  // Both objectives range over 6. Sorted by the first: 0, 1, 2, 6; by the second: 0, 2, 3, 6.
  const std::vector<ParetoPoint> points = {{{0, 6}, 0}, {{1, 3}, 0}, {{2, 2}, 0}, {{6, 0}, 0}};
  const std::vector<double> d = crowding_distance(points, {0, 1, 2, 3});
  EXPECT_EQ(d[0], kInf);
  EXPECT_DOUBLE_EQ(d[1], (2.0 - 0) / 6 + (6.0 - 2) / 6);
  EXPECT_DOUBLE_EQ(d[2], (6.0 - 1) / 6 + (3.0 - 0) / 6);
  EXPECT_EQ(d[3], kInf);
  // Of a sub-front, in its order.
  EXPECT_EQ(crowding_distance(points, {2, 1}), (std::vector<double>{kInf, kInf}));
}

TEST(Pareto, HypervolumeByHand) {
  // A staircase, to minimize: 3 * 1 + 2 * 1 + 1 * 1.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}, {false, false}), 6);
  // The same to maximize, negated; a point beyond the reference adds nothing.
  EXPECT_DOUBLE_EQ(hypervolume({{-1, -3}, {-2, -2}, {-3, -1}, {-5, 0}}, {-4, -4}, {true, true}), 6);
  // One box in three objectives, and two overlapping in a unit cube: 4 + 2 - 1.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 1, 1}}, {2, 3, 4}, {false, false, false}), 6);
  EXPECT_DOUBLE_EQ(hypervolume({{0, 0, 1}, {1, 1, 0}}, {2, 2, 2}, {false, false, false}), 5);
  // Mixed directions: x to maximize, y to minimize.
  EXPECT_DOUBLE_EQ(hypervolume({{3, 1}}, {1, 2}, {true, false}), 2);
}

// The union of the boxes by inclusion and exclusion over every subset of the points.
double inclusion_exclusion(const std::vector<std::vector<double>>& points,
                           const std::vector<double>& reference, const Directions& d) {
  double total = 0;
  const size_t n = points.size();
  for (uint32_t subset = 1; subset < (1u << n); ++subset) {
    double box = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      // Distances from the reference towards better: the subset's intersection is its worst.
      double reach = kInf;
      for (size_t k = 0; k < n; ++k)
        if (subset >> k & 1)
          reach = std::min(reach, d[i] ? points[k][i] - reference[i] : reference[i] - points[k][i]);
      box *= std::max(0.0, reach);
    }
    total += __builtin_popcount(subset) % 2 ? box : -box;
  }
  return total;
}

TEST(Pareto, HypervolumeMatchesInclusionExclusion) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 400; ++round) {
    const size_t m = 2 + rng() % 2, n = rng() % 8;
    const Directions d = random_directions(rng, m);
    std::vector<std::vector<double>> points;
    for (const ParetoPoint& p : random_points(rng, n, m))
      if (all_finite(p.values)) points.push_back(p.values);
    std::vector<double> reference(m);
    for (size_t i = 0; i < m; ++i) reference[i] = d[i] ? -0.25 : 3.25;
    if (rng() % 3 == 0)  // a reference some points do not beat
      for (size_t i = 0; i < m; ++i) reference[i] = 0.5;
    SCOPED_TRACE("round " + std::to_string(round));
    EXPECT_NEAR(hypervolume(points, reference, d), inclusion_exclusion(points, reference, d), 1e-9);
  }
}

// ---------------------------------------------------------------------------------------------
// A study of synthetic objectives

// An external trainer's study, so that leaves and metrics may have any name: `dims` leaves x0, x1,
// ... uniform in [0, 1]; 108 steps, evaluated every 10.
json study(int dims, json searcher) {
  json leaves = json::object();
  for (int i = 0; i < dims; ++i) {
    std::string name = "x";  // appended: GCC 12 warns about "x" + std::to_string(i)
    name += std::to_string(i);
    leaves[name] = {{"uniform", {0.0, 1.0}}};
  }
  return {{"name", "multi-objective"},
          {"model", {{"type", "external"}, {"command", {"/bin/true"}}}},
          {"data", {{"name", "synthetic"}}},
          {"seed", 3},
          {"hyperparameters", leaves},
          {"searcher", std::move(searcher)},
          {"length", {{"steps", 108}}},
          {"eval", {{"every", {{"steps", 10}}}}}};
}

const json kTwoToMinimize = {
    {"objectives", {{{"metric", "f1"}, {"mode", "min"}}, {{"metric", "f2"}, {"mode", "min"}}}}};

json nsga2(int64_t population, int64_t max_trials, json more = kTwoToMinimize) {
  json s = {{"name", "nsga2"}, {"population", population}, {"max_trials", max_trials}};
  s.update(more);
  return s;
}

// What a trial reports at a step; nullopt: it fails there.
using Outcome = std::function<std::optional<Evaluation>(RequestId, const Params&, int64_t step)>;

struct StudyRun {
  std::vector<Operation> ops;  // everything the searcher returned, in order
  std::vector<Params> params;  // by trial
  json state;                  // the searcher's at the end
  bool finished = false;
};

// A master stand-in: it carries out the Trains in the order they come, reporting each evaluation
// and then the close (or the failure). With `reload_after`, the searcher is replaced after that
// many events by a fresh one loaded from its saved state, through text as the search plan keeps it.
StudyRun run_study(const StudySpec& spec, const Outcome& outcome, size_t reload_after = SIZE_MAX) {
  std::unique_ptr<Searcher> s = make_searcher(spec);
  StudyRun run;
  std::deque<Train> queue;
  auto take = [&](const std::vector<Operation>& ops) {
    for (const Operation& op : ops) {
      run.ops.push_back(op);
      if (const Create* c = std::get_if<Create>(&op)) {
        EXPECT_EQ(c->trial, static_cast<RequestId>(run.params.size()));
        run.params.push_back(c->params);
      }
      if (const Train* t = std::get_if<Train>(&op)) queue.push_back(*t);
      if (const Stop* st = std::get_if<Stop>(&op))
        std::erase_if(queue, [&](const Train& t) { return t.trial == st->trial; });
      run.finished = run.finished || std::holds_alternative<Finish>(op);
    }
  };
  size_t events = 0;
  auto event = [&](const std::function<std::vector<Operation>()>& feed) {
    if (events++ == reload_after) {
      json saved = json::parse(s->save().dump());
      s = make_searcher(spec);
      s->load(saved);
    }
    take(feed());
  };
  take(s->on_study_start());
  while (!run.finished) {
    if (queue.empty()) {  // a searcher that gives its trials in batches (random) has more
      const size_t before = run.ops.size();
      event([&] { return s->next_batch(); });
      if (run.ops.size() == before) break;
      continue;
    }
    const Train t = queue.front();
    queue.pop_front();
    bool failed = false;
    for (int64_t step : t.eval_steps) {
      std::optional<Evaluation> e = outcome(t.trial, run.params[t.trial], step);
      if (!e) {
        failed = true;
        break;
      }
      event([&] { return s->on_evaluation(t.trial, step, *e); });
    }
    event([&] { return failed ? s->on_trial_failed(t.trial) : s->on_trial_closed(t.trial); });
  }
  run.state = s->save();
  return run;
}

// Values that hold at the study's last step (108); earlier evaluations report them worse by one,
// so that only the last evaluation may count.
Outcome at_the_end(std::function<Evaluation(RequestId, const Params&)> f, const Directions& d) {
  return [f, d](RequestId id, const Params& p, int64_t step) -> std::optional<Evaluation> {
    Evaluation e = f(id, p);
    if (step < 108)
      for (size_t i = 0; i < d.size(); ++i) e.values[i] += d[i] ? -1 : 1;
    return e;
  };
}

// Fixed values by trial id; ids beyond the table get `rest`.
Outcome table(std::vector<Evaluation> values, Evaluation rest) {
  return at_the_end(
      [values, rest](RequestId id, const Params&) {
        return static_cast<size_t>(id) < values.size() ? values[id] : rest;
      },
      {false, false});
}

Evaluation point(double f1, double f2, double violation = 0) {
  return {{f1, f2}, violation, f1};
}

std::vector<RequestId> parents(const StudyRun& run) {
  return run.state.at("parents").get<std::vector<RequestId>>();
}

// ---------------------------------------------------------------------------------------------
// nsga2

TEST(Nsga2, SelectionKeepsTheFirstFronts) {
  // Generation 1 brings 6, which dominates 0 .. 3 and 7, and 4 and 5, which nothing dominates:
  // the first front is {4, 5, 6}, the second {0}.
  StudySpec spec = parse_spec(study(2, nsga2(4, 12)));
  StudyRun run = run_study(spec, table({point(1, 1), point(2, 2), point(3, 3), point(4, 4),
                                        point(0, 5), point(5, 0), point(0.5, 0.5), point(6, 6)},
                                       point(9, 9)));
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.params.size(), 12u);
  EXPECT_EQ(parents(run), (std::vector<RequestId>{0, 4, 5, 6}));
}

TEST(Nsga2, TheLastFrontIsCutByCrowdingDistance) {
  // Every point on the line f1 + f2 = 10: one front of six, three kept. By f1: 0 (trial 0),
  // 1 (3), 2 (2), 5 (4), 9 (5), 10 (1); crowding: the ends infinite, then 4 has 1.4, 5 1.0.
  auto on_line = [](std::vector<double> f1) {
    std::vector<Evaluation> values;
    for (double x : f1) values.push_back(point(x, 10 - x));
    return values;
  };
  StudySpec spec = parse_spec(study(2, nsga2(3, 9)));
  EXPECT_EQ(parents(run_study(spec, table(on_line({0, 10, 2, 1, 5, 9}), point(20, 20)))),
            (std::vector<RequestId>{0, 1, 4}));
  // Evenly spaced: every inner point has 0.8, and the lowest id goes.
  EXPECT_EQ(parents(run_study(spec, table(on_line({0, 10, 6, 2, 4, 8}), point(20, 20)))),
            (std::vector<RequestId>{0, 1, 2}));
}

TEST(Nsga2, FeasibleTrialsComeFirst) {
  // 0 and 3 have the best values but break a constraint (3 by less); 1 dominates 2.
  json searcher = nsga2(2, 6);
  searcher["constraints"] = {{{"metric", "c"}, {"max", 1}}};
  StudySpec spec = parse_spec(study(2, searcher));
  const Outcome outcome =
      table({point(0, 0, 1), point(5, 5), point(6, 6), point(0, 0, 0.5)}, point(9, 9));
  EXPECT_EQ(parents(run_study(spec, outcome)), (std::vector<RequestId>{1, 2}));
  searcher["population"] = 3;
  searcher["max_trials"] = 9;
  spec = parse_spec(study(2, searcher));
  EXPECT_EQ(parents(run_study(spec, table({point(0, 0, 1), point(5, 5), point(6, 6),
                                           point(0, 0, 0.5), point(7, 7), point(0, 0, 2)},
                                          point(9, 9)))),
            (std::vector<RequestId>{1, 2, 4}));
}

TEST(Nsga2, FailedTrialsAreNeverParents) {
  StudySpec spec = parse_spec(study(2, nsga2(4, 8)));
  auto failing = [](std::set<RequestId> fail) -> Outcome {
    return [fail](RequestId id, const Params&, int64_t step) -> std::optional<Evaluation> {
      if (fail.count(id) && step >= 20) return std::nullopt;  // after an evaluation
      return point(double(id), double(id));
    };
  };
  // 1 and 2 were the best of generation 0 before they failed.
  StudyRun run = run_study(spec, failing({1, 2}));
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(parents(run), (std::vector<RequestId>{0, 3}));
  // Without any parent the next generation is drawn, as generation 0 was.
  run = run_study(spec, failing({0, 1, 2, 3}));
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(parents(run), (std::vector<RequestId>{}));
  for (RequestId id = 4; id < 8; ++id)
    EXPECT_EQ(run.params[id], spec.space.draw(spec.seed, id, std::nullopt));
}

// ZDT1 over five leaves: f1 = x0, g = 1 + 9 mean(x1 .. x4), f2 = g (1 - sqrt(f1 / g)), both to
// minimize; the Pareto front is x1 = .. = x4 = 0.
Evaluation zdt1(RequestId, const Params& p) {
  const double f1 = p["x0"].get<double>();
  double sum = 0;
  for (const char* x : {"x1", "x2", "x3", "x4"}) sum += p[x].get<double>();
  const double g = 1 + 9 * sum / 4;
  return point(f1, g * (1 - std::sqrt(f1 / g)));
}

double hypervolume_of(const std::vector<Params>& trials, size_t first, size_t last) {
  std::vector<std::vector<double>> points;
  for (size_t id = first; id < last; ++id) points.push_back(zdt1(0, trials[id]).values);
  return hypervolume(points, {1.1, 11}, {false, false});
}

TEST(Nsga2, ImprovesTheHypervolumeOfZdt1) {
  StudySpec spec = parse_spec(study(5, nsga2(20, 300)));
  StudyRun run = run_study(spec, at_the_end(zdt1, {false, false}));
  ASSERT_TRUE(run.finished);
  ASSERT_EQ(run.params.size(), 300u);
  const double first = hypervolume_of(run.params, 0, 20);
  const double last = hypervolume_of(run.params, 280, 300);
  const double all = hypervolume_of(run.params, 0, 300);
  // Random search with the same budget, for scale.
  json random = {{"name", "random"}, {"max_trials", 300}};
  random.update(kTwoToMinimize);
  const double random_all = hypervolume_of(
      run_study(parse_spec(study(5, random)), at_the_end(zdt1, {false, false})).params, 0, 300);
  std::cout << "ZDT1 hypervolume: generation 0 " << first << ", generation 14 " << last << ", all "
            << all << "; random search " << random_all << "\n";
  // The front's hypervolume: the box less the area above f2 = 1 - sqrt(f1), 1/3. The last
  // generation closes more than half of generation 0's gap to it.
  const double front = 1.1 * 11 - 1.0 / 3;
  EXPECT_LT(front - last, (front - first) / 2);
  EXPECT_GT(all, random_all);
}

TEST(Nsga2, OneObjectiveIsAGeneticAlgorithm) {
  json searcher = {{"name", "nsga2"},
                   {"population", 10},
                   {"max_trials", 100},
                   {"metric", "loss"},
                   {"mode", "min"}};
  StudySpec spec = parse_spec(study(3, searcher));
  auto sphere = [](RequestId, const Params& p) {
    double loss = 0;
    for (const char* x : {"x0", "x1", "x2"}) loss += std::pow(p[x].get<double>() - 0.3, 2);
    return Evaluation{{loss}, 0, loss};
  };
  StudyRun run = run_study(spec, at_the_end(sphere, {false}));
  ASSERT_TRUE(run.finished);
  auto best = [&](size_t first, size_t last) {
    double b = kInf;
    for (size_t id = first; id < last; ++id) b = std::min(b, sphere(0, run.params[id]).value);
    return b;
  };
  std::cout << "sphere: best of generation 0 " << best(0, 10) << ", of generation 9 "
            << best(90, 100) << "\n";
  EXPECT_LT(best(90, 100), best(0, 10) / 2);
}

TEST(Nsga2, TheSameEventsGiveTheSameStudy) {
  StudySpec spec = parse_spec(study(5, nsga2(8, 40)));
  EXPECT_TRUE(make_searcher(spec)->replays_exactly());
  const Outcome outcome = at_the_end(zdt1, {false, false});
  const StudyRun whole = run_study(spec, outcome);
  EXPECT_EQ(describe(run_study(spec, outcome).ops), describe(whole.ops));
  // Reloaded before the start of generation 1, in its middle, at its end and near the finish.
  for (size_t reload : {0, 5, 45, 99, 100, 101, 200, 430}) {
    SCOPED_TRACE("reloaded after " + std::to_string(reload) + " events");
    const StudyRun reloaded = run_study(spec, outcome, reload);
    EXPECT_EQ(describe(reloaded.ops), describe(whole.ops));
    EXPECT_EQ(reloaded.state, whole.state);
  }
  // Another seed, another study.
  json other = study(5, nsga2(8, 40));
  other["seed"] = 4;
  EXPECT_NE(describe(run_study(parse_spec(other), outcome).ops), describe(whole.ops));
}

TEST(Nsga2, InfiniteValuesSurviveSaveAndLoad) {
  StudySpec spec = parse_spec(study(2, nsga2(2, 6)));
  const Outcome diverging = at_the_end(
      [](RequestId id, const Params&) { return id % 2 ? point(kInf, kInf, kInf) : point(1, 1); },
      {false, false});
  const StudyRun whole = run_study(spec, diverging);
  for (size_t reload : {10, 24}) {
    const StudyRun reloaded = run_study(spec, diverging, reload);
    EXPECT_EQ(describe(reloaded.ops), describe(whole.ops));
  }
  EXPECT_EQ(whole.state["trials"][1]["last"]["values"], json({"inf", "inf"}));
  EXPECT_EQ(whole.state["trials"][1]["last"]["violation"], "inf");
}

TEST(Nsga2, BadOptionsAreRefusedAtTheirPath) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"population", 1}}, "searcher.population: "},
      {{{"population", 10001}}, "searcher.population: "},
      {{{"population", 2.5}}, "searcher.population: "},
      {{{"mutation_prob", 1.5}}, "searcher.mutation_prob: expected a number in [0, 1], got 1.5"},
      {{{"crossover_prob", -0.1}}, "searcher.crossover_prob: expected a number in [0, 1]"},
      {{{"swapping_prob", "half"}}, "searcher.swapping_prob: "},
      {{{"eta", 3}}, "searcher.eta: "},
  };
  for (const auto& [options, error] : cases) {
    json searcher = nsga2(4, 8);
    searcher.update(options);
    EXPECT_EQ(spec_error(study(2, searcher)).substr(0, error.size()), error) << options;
  }
  json searcher = nsga2(4, 8);
  searcher.erase("max_trials");
  EXPECT_EQ(spec_error(study(2, searcher)), "searcher.max_trials: missing (nsga2 needs it)");
  searcher = nsga2(4, 8);
  searcher.erase("population");  // the default, 20
  EXPECT_EQ(spec_error(study(2, searcher)), "accepted");
}

TEST(Nsga2, MalformedStatesAreRefusedNamingTheField) {
  StudySpec spec = parse_spec(study(2, nsga2(4, 8)));
  const json good = run_study(spec, table({}, point(1, 1)), 12).state;
  auto error = [&](const json& state) -> std::string {
    try {
      make_searcher(spec)->load(state);
    } catch (const SpecError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(error(good), "accepted");
  json state = good;
  state["trials"].erase(7);
  EXPECT_EQ(error(state), "state.trials: has 7 trials, not whole generations of 4");
  state = good;
  state["parents"] = {5};
  EXPECT_EQ(error(state), "state.parents[0]: not a trial of an earlier generation");
  state = good;
  state["parents"] = {2, 1};
  EXPECT_EQ(error(state), "state.parents[1]: parents must be increasing ids");
  state = good;
  state["trials"][0]["last"]["values"] = {1};
  EXPECT_EQ(error(state), "state.trials[0].last.values: expected 2 values, one by objective");
  state = good;
  state["trials"][0]["status"] = "running";
  EXPECT_EQ(error(state), "state.trials[0].status: running, but its generation has ended");
  state = good;
  state["trials"][2]["status"] = "lost";
  EXPECT_EQ(error(state), "state.trials[2].status: unknown status \"lost\"");
}

// ---------------------------------------------------------------------------------------------
// moasha

json halving(const std::string& name, int64_t eta, int64_t min_steps, int64_t max_trials,
             int64_t parallel, json goals) {
  json s = {{"name", name},
            {"eta", eta},
            {"min_length", {{"steps", min_steps}}},
            {"max_trials", max_trials},
            {"parallel", parallel}};
  s.update(goals);
  return s;
}

// Feeds one RandomMaster event to a searcher; a validation as `evaluation` makes it.
std::vector<Operation> feed(
    Searcher& s, const RandomMaster::Event& e,
    const std::function<Evaluation(const RandomMaster::Event&)>& evaluation) {
  switch (e.kind) {
    case RandomMaster::Event::kValidation:
      return s.on_evaluation(e.trial, e.step, evaluation(e));
    case RandomMaster::Event::kClosed:
      return s.on_trial_closed(e.trial);
    case RandomMaster::Event::kFailed:
      return s.on_trial_failed(e.trial);
    case RandomMaster::Event::kNextBatch:
      return s.next_batch();
  }
  return {};
}

std::unique_ptr<Searcher> reloaded(const StudySpec& spec, const Searcher& s) {
  std::unique_ptr<Searcher> fresh = make_searcher(spec);
  fresh->load(json::parse(s.save().dump()));
  return fresh;
}

TEST(MoAsha, WithOneObjectiveItIsAshaOperationForOperation) {
  std::mt19937_64 rng(17);
  int64_t events = 0;
  for (int sequence = 0; sequence < 120 && !::testing::Test::HasFailure(); ++sequence) {
    const int64_t eta = 2 + static_cast<int64_t>(rng() % 3);
    const int64_t mins[] = {1, 4, 5, 12, 40, 108}, parallels[] = {1, 2, 3, 5, 16, 64};
    const int64_t min_steps = mins[rng() % 6], parallel = parallels[rng() % 6];
    const int64_t max_trials = 1 + static_cast<int64_t>(rng() % 200);
    const json goal = rng() % 2 ? json{{"metric", "f1"}, {"mode", "max"}}
                                : json{{"metric", "f1"}, {"mode", "min"}};
    SCOPED_TRACE("sequence " + std::to_string(sequence));
    const StudySpec asha_spec =
        parse_spec(study(1, halving("asha", eta, min_steps, max_trials, parallel, goal)));
    const StudySpec moasha_spec =
        parse_spec(study(1, halving("moasha", eta, min_steps, max_trials, parallel, goal)));
    std::unique_ptr<Searcher> asha = make_searcher(asha_spec), moasha = make_searcher(moasha_spec);
    RandomMaster master(rng());
    std::vector<Operation> ops = moasha->on_study_start();
    EXPECT_EQ(describe(ops), describe(asha->on_study_start()));
    master.take(ops);
    auto one_value = [](const RandomMaster::Event& e) { return Evaluation{{e.value}, 0, e.value}; };
    while (!master.finished() && !master.idle() && !::testing::Test::HasFailure()) {
      if (rng() % 40 == 0) moasha = reloaded(moasha_spec, *moasha);
      const RandomMaster::Event e = master.next();
      ++events;
      ops = feed(*moasha, e, one_value);
      EXPECT_EQ(describe(ops), describe(feed(*asha, e, one_value)))
          << "event " << events << " (kind " << e.kind << ", trial " << e.trial << ")";
      master.take(ops);
    }
    EXPECT_TRUE(master.finished());
  }
  std::cout << "moasha against asha: 120 sequences, " << events << " events\n";
}

// Rung k's trials in moasha's order, read from a saved state: those that finished the rung with a
// value there (the trial is past it, or no longer running at it), by (front, larger crowding,
// lower id); with `eta`, only the first floor(count / eta), which may be promoted.
std::vector<RequestId> rung_order(const json& state, size_t k, const Directions& d) {
  std::vector<RequestId> ids;
  std::vector<ParetoPoint> points;
  const json& trials = state["trials"];
  for (size_t id = 0; id < trials.size(); ++id) {
    const json& values = trials[id]["values"];
    if (values.size() <= k || values[k].is_null()) continue;
    if (values.size() == k + 1 && trials[id]["running"].get<bool>()) continue;
    ParetoPoint p;
    for (const json& v : values[k]["values"]) p.values.push_back(*number_of_json(v));
    p.violation = *number_of_json(values[k]["violation"]);
    ids.push_back(static_cast<RequestId>(id));
    points.push_back(p);
  }
  struct Place {
    size_t front;
    double crowding;
    RequestId id;
  };
  std::vector<Place> places;
  const auto fronts = non_dominated_sort(points, d);
  for (size_t f = 0; f < fronts.size(); ++f) {
    const std::vector<double> crowding = crowding_distance(points, fronts[f]);
    for (size_t i = 0; i < fronts[f].size(); ++i)
      places.push_back({f, crowding[i], ids[fronts[f][i]]});
  }
  std::sort(places.begin(), places.end(), [](const Place& a, const Place& b) {
    return std::tie(a.front, b.crowding, a.id) < std::tie(b.front, a.crowding, b.id);
  });
  std::vector<RequestId> order;
  for (const Place& p : places) order.push_back(p.id);
  return order;
}

// Two objectives from the master's one random value (NaN and infinities included), every fifth
// trial infeasible.
Evaluation two_values(const RandomMaster::Event& e) {
  const double second = std::isfinite(e.value) ? std::cos(7 * e.value + double(e.trial)) : e.value;
  return {{e.value, second}, e.trial % 5 == 0 ? 0.5 : 0, e.value};
}

TEST(MoAsha, TwoObjectivesSaveLoadAndPromoteWithinTheirRung) {
  std::mt19937_64 rng(23);
  int64_t promotions = 0;
  for (int sequence = 0; sequence < 40 && !::testing::Test::HasFailure(); ++sequence) {
    const int64_t eta = 2 + static_cast<int64_t>(rng() % 3);
    const int64_t parallel = 1 + static_cast<int64_t>(rng() % 8);
    json goals = {
        {"objectives", {{{"metric", "f1"}, {"mode", "max"}}, {{"metric", "f2"}, {"mode", "min"}}}},
        {"constraints", {{{"metric", "c"}, {"max", 1}}}}};
    const StudySpec spec = parse_spec(study(
        1, halving("moasha", eta, 4, 1 + static_cast<int64_t>(rng() % 120), parallel, goals)));
    const Directions d = spec.searcher.goals.directions();
    std::unique_ptr<Searcher> whole = make_searcher(spec), reloading = make_searcher(spec);
    RandomMaster master(rng());
    std::vector<Operation> ops = whole->on_study_start();
    EXPECT_EQ(describe(ops), describe(reloading->on_study_start()));
    master.take(ops);
    while (!master.finished() && !master.idle() && !::testing::Test::HasFailure()) {
      if (rng() % 20 == 0) reloading = reloaded(spec, *reloading);
      const RandomMaster::Event e = master.next();
      ops = feed(*whole, e, two_values);
      EXPECT_EQ(describe(ops), describe(feed(*reloading, e, two_values)));
      // Each promotion (a Train past rung 0) is of a trial among the first floor(count / eta) of
      // its rung, in the order of fronts and crowding.
      const json state = whole->save();
      for (const Operation& op : ops) {
        const Train* t = std::get_if<Train>(&op);
        const size_t rung = t ? state["trials"][t->trial]["values"].size() - 1 : 0;
        if (rung == 0) continue;
        ++promotions;
        std::vector<RequestId> order = rung_order(state, rung - 1, d);
        order.resize(order.size() / eta);
        EXPECT_NE(std::find(order.begin(), order.end(), t->trial), order.end())
            << "trial " << t->trial << " promoted from rung " << rung - 1;
      }
      master.take(ops);
    }
    EXPECT_TRUE(master.finished());
    EXPECT_EQ(whole->save(), reloading->save());
  }
  std::cout << "moasha, two objectives: " << promotions << " promotions checked\n";
  EXPECT_GT(promotions, 100);
}

TEST(MoAsha, PromotesTheNonDominated) {
  // One trial at a time, eta 3: after the third closes at rung 0 (step 4) one goes on. Trial 1 is
  // the best in f1, but 0 dominates 2 and is as good a front member as 1 (both ends: ties to the
  // lower id); asha on f1 alone would promote 1.
  json goals = {
      {"objectives", {{{"metric", "f1"}, {"mode", "max"}}, {{"metric", "f2"}, {"mode", "max"}}}}};
  auto first_promoted = [](const json& searcher, std::vector<Evaluation> at_rung_0) {
    const StudySpec spec = parse_spec(study(1, searcher));
    StudyRun run = run_study(
        spec, [&](RequestId id, const Params&, int64_t) { return std::optional(at_rung_0[id]); });
    EXPECT_TRUE(run.finished);
    for (const Operation& op : run.ops)
      if (const Train* t = std::get_if<Train>(&op); t && t->length == 12) return t->trial;
    return RequestId{-1};
  };
  const std::vector<Evaluation> values = {
      {{0.6, 0.6}, 0, 0.6}, {{0.7, 0.1}, 0, 0.7}, {{0.5, 0.5}, 0, 0.5}};
  EXPECT_EQ(first_promoted(halving("moasha", 3, 4, 3, 1, goals), values), 0);
  EXPECT_EQ(
      first_promoted(halving("asha", 3, 4, 3, 1, {{"metric", "f1"}, {"mode", "max"}}), values), 1);
  // With a constraint, the feasible trial whose values dominate the other feasible one.
  goals["constraints"] = {{{"metric", "c"}, {"max", 1}}};
  EXPECT_EQ(first_promoted(halving("moasha", 3, 4, 3, 1, goals),
                           {{{0.9, 0.9}, 1, 0.9}, {{0.5, 0.5}, 0, 0.5}, {{0.4, 0.4}, 0, 0.4}}),
            1);
}

TEST(MoAsha, SavedStatesHoldEveryValue) {
  json goals = {
      {"objectives", {{{"metric", "f1"}, {"mode", "max"}}, {{"metric", "f2"}, {"mode", "max"}}}},
      {"constraints", {{{"metric", "c"}, {"max", 1}}}}};
  const StudySpec spec = parse_spec(study(1, halving("moasha", 3, 4, 3, 1, goals)));
  std::unique_ptr<Searcher> s = make_searcher(spec);
  s->on_study_start();
  s->on_evaluation(0, 4, {{0.5, 0.25}, kInf, 0.5});
  s->on_trial_closed(0);
  const json state = s->save();
  EXPECT_EQ(state["trials"][0]["values"][0], json({{"values", {0.5, 0.25}}, {"violation", "inf"}}));
  auto error = [&](const json& bad) -> std::string {
    try {
      make_searcher(spec)->load(bad);
    } catch (const SpecError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(error(state), "accepted");
  json bad = state;
  bad["trials"][0]["values"][0]["values"] = {0.5};
  EXPECT_EQ(error(bad), "state.trials[0].values[0].values: expected 2 values, one by objective");
  bad = state;
  bad["trials"][0]["values"][0] = 0.5;  // asha's form
  EXPECT_EQ(error(bad).substr(0, 28), "state.trials[0].values[0]: e");
}

// Cost: a rung is sorted again, O(n^2) for n trials there, when a trial joins it: O(n^3) in all for
// the lowest rung. 1,000 trials take about 7 s on a loaded 2-core machine.
TEST(MoAsha, AThousandTrialsTakeSeconds) {
  const int64_t trials = 1000;
  json goals = {
      {"objectives", {{{"metric", "f1"}, {"mode", "max"}}, {{"metric", "f2"}, {"mode", "min"}}}}};
  const StudySpec spec = parse_spec(study(1, halving("moasha", 3, 4, trials, 100, goals)));
  std::mt19937_64 rng(9);
  const auto start = std::chrono::steady_clock::now();
  StudyRun run = run_study(spec, [&](RequestId, const Params&, int64_t) {
    const double x = std::uniform_real_distribution<double>()(rng);
    return std::optional(Evaluation{{x, std::uniform_real_distribution<double>()(rng)}, 0, x});
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << trials << " moasha trials of two objectives: " << seconds << " s\n";
  EXPECT_TRUE(run.finished);
  EXPECT_EQ(run.params.size(), static_cast<size_t>(trials));
  EXPECT_LT(seconds, 60.0);
}

}  // namespace
}  // namespace hippo
