// search_quality: how well a searcher searches, without training. A synthetic objective is
// computed from each created trial's params and fed to the searcher as its validations, the oldest
// running trial first; after N trials the best value is printed, per seed, as one JSON line:
//
//   search_quality OBJECTIVE SEARCHER_JSON TRIALS SEEDS
//   {"seed": 0, "trials": 100, "best": 0.0132}
//
// OBJECTIVE is bowl, branin, hartmann6 or curves; SEARCHER_JSON the spec's searcher object
// without metric, mode and max_trials (e.g. '{"name": "tpe", "parallel": 1}'). The objectives are
// the same as bench/optuna_quality.py's (bench/search_quality.sh compares the two).
#include <cmath>
#include <cstdio>
#include <deque>
#include <iostream>
#include <numbers>
#include <string>

#include "searchers/searcher.h"

namespace {

using hippo::Params;
using nlohmann::json;

double number(const Params& p, const std::string& name) {
  return p.at(name).get<double>();
}

// The name of leaf i of a box: x0, x1, ... (appended, not `"x" + ...`, which GCC 12 warns about).
std::string box_leaf(int i) {
  std::string name = "x";
  name += std::to_string(i);
  return name;
}

// A 4-D quadratic bowl over [-2, 2]^4, its minimum 0 at c.
double bowl(const Params& p, int64_t) {
  const double c[4] = {0.5, -1.0, 1.0, -0.25};
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += std::pow(number(p, box_leaf(i)) - c[i], 2);
  return sum;
}

// Branin over [-5, 10] x [0, 15].
double branin(const Params& p, int64_t) {
  double x = number(p, "x"), y = number(p, "y"), pi = std::numbers::pi;
  return std::pow(y - 5.1 / (4 * pi * pi) * x * x + 5 / pi * x - 6, 2) +
         10 * (1 - 1 / (8 * pi)) * std::cos(x) + 10;
}

// Hartmann 6-D over [0, 1]^6.
double hartmann6(const Params& p, int64_t) {
  const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                          {0.05, 10, 17, 0.1, 8, 14},
                          {3, 3.5, 1.7, 10, 17, 8},
                          {17, 8, 0.05, 10, 0.1, 14}};
  const double q[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                          {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                          {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                          {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += a[i][j] * std::pow(number(p, box_leaf(j)) - q[i][j], 2);
    sum -= alpha[i] * std::exp(-inner);
  }
  return sum;
}

// Replayed learning curves: the loss of a network of `width` trained with `lr` and `weight_decay`
// at step t of 40, falling from 2.3 towards a final loss at a speed that a bad learning rate slows.
// The best learning rate shrinks as the width grows (an interaction), and each configuration has
// its own noise in [0, 0.02), a hash of its params.
double curves(const Params& p, int64_t step) {
  double lr = std::log10(number(p, "lr")), wd = std::log10(number(p, "weight_decay"));
  double width = number(p, "width");
  double u = lr + 2 + 0.3 * (std::log2(width) - 7), v = wd + 4, w = std::log2(width) - 8;
  double h = std::sin(12.9898 * lr + 78.233 * wd + 37.719 * width) * 43758.5453;
  double final_loss = 0.1 + 0.15 * u * u + 0.05 * v * v + 0.02 * w * w + 0.02 * (h - std::floor(h));
  double speed = 1 / (1 + 0.5 * u * u);
  return final_loss + (2.3 - final_loss) * std::exp(-5 * speed * double(step) / 40);
}

struct Objective {
  const char* name;
  json space;
  double (*loss)(const Params&, int64_t step);
};

json uniform_box(int dims, double lo, double hi) {
  json h = json::object();
  for (int i = 0; i < dims; ++i) h[box_leaf(i)] = {{"uniform", {lo, hi}}};
  return h;
}

const Objective* find_objective(const std::string& name) {
  static const Objective objectives[] = {
      {"bowl", uniform_box(4, -2, 2), bowl},
      {"branin", {{"x", {{"uniform", {-5, 10}}}}, {"y", {{"uniform", {0, 15}}}}}, branin},
      {"hartmann6", uniform_box(6, 0, 1), hartmann6},
      {"curves",
       {{"lr", {{"loguniform", {1e-4, 1.0}}}},
        {"weight_decay", {{"loguniform", {1e-6, 1e-1}}}},
        {"width", {{"int", {16, 1024}}}}},
       curves},
  };
  for (const Objective& o : objectives)
    if (name == o.name) return &o;
  return nullptr;
}

// Runs one study to its Finish; returns the number of trials closed and the best value seen.
std::pair<int64_t, double> run(const Objective& objective, json searcher, int64_t trials,
                               int seed) {
  searcher.update({{"metric", "loss"}, {"mode", "min"}, {"max_trials", trials}});
  json spec_json = {{"name", "search-quality"},
                    {"model", {{"type", "external"}, {"command", {"/bin/true"}}}},
                    {"data", {{"name", "synthetic"}}},
                    {"seed", seed},
                    {"hyperparameters", objective.space},
                    {"searcher", searcher},
                    {"length", {{"steps", 40}}},
                    {"eval", {{"every", {{"steps", 10}}}}}};
  std::unique_ptr<hippo::Searcher> s = hippo::make_searcher(hippo::parse_spec(spec_json));
  std::vector<Params> params;
  std::vector<std::vector<int64_t>> eval_steps;
  std::deque<hippo::RequestId> running;
  bool finished = false;
  auto take = [&](const std::vector<hippo::Operation>& ops) {
    for (const hippo::Operation& op : ops) {
      if (const auto* c = std::get_if<hippo::Create>(&op)) {
        params.push_back(c->params);
        eval_steps.emplace_back();
      } else if (const auto* t = std::get_if<hippo::Train>(&op)) {
        eval_steps[t->trial] = t->eval_steps;
        running.push_back(t->trial);
      } else if (std::holds_alternative<hippo::Finish>(op)) {
        finished = true;
      }
    }
  };
  take(s->on_study_start());
  int64_t closed = 0;
  double best = INFINITY;
  while (!finished && !running.empty()) {
    hippo::RequestId t = running.front();
    running.pop_front();
    for (int64_t step : eval_steps[t]) {
      double value = objective.loss(params[t], step);
      if (step == eval_steps[t].back()) best = std::min(best, value);
      take(s->on_validation(t, step, value));
    }
    take(s->on_trial_closed(t));
    ++closed;
  }
  return {closed, best};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: search_quality OBJECTIVE SEARCHER_JSON TRIALS SEEDS\n";
    return 2;
  }
  const Objective* objective = find_objective(argv[1]);
  if (!objective) {
    std::cerr << "search_quality: unknown objective " << argv[1] << "\n";
    return 2;
  }
  try {
    json searcher = json::parse(argv[2]);
    int64_t trials = std::stoll(argv[3]);
    int seeds = std::stoi(argv[4]);
    for (int seed = 0; seed < seeds; ++seed) {
      auto [closed, best] = run(*objective, searcher, trials, seed);
      std::cout << json{{"seed", seed}, {"trials", closed}, {"best", best}}.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "search_quality: " << e.what() << "\n";
    return 1;
  }
}
