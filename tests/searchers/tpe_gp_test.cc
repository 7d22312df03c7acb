// tpe (Optuna's good-set size, multivariate, constant liar) and gp: proposals that show each
// rule, search quality against random on a small continuous problem, save/load round trips that
// continue identically, and option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <numbers>

#include "searchers/searcher.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using nlohmann::json;
using testing::spec_error;

// An external trainer's study, so that leaves may have any name: 40 steps, evaluated every 10.
json study(json hyperparameters, json searcher) {
  return {{"name", "tpe-gp"},
          {"model", {{"type", "external"}, {"command", {"/bin/true"}}}},
          {"data", {{"name", "synthetic"}}},
          {"seed", 7},
          {"hyperparameters", std::move(hyperparameters)},
          {"searcher", std::move(searcher)},
          {"length", {{"steps", 40}}},
          {"eval", {{"every", {{"steps", 10}}}}}};
}

json searcher(const std::string& name, json options = json::object()) {
  json s = {{"name", name}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 30}};
  s.update(options);
  return s;
}

json unit_square(int dims) {
  json h = json::object();
  for (int i = 0; i < dims; ++i) {
    std::string name = "x";  // appended: GCC 12 warns about "x" + std::to_string(i)
    name += std::to_string(i);
    h[name] = {{"uniform", {0.0, 1.0}}};
  }
  return h;
}

struct Outcome {
  std::vector<Params> trials;                               // by id
  std::vector<double> losses;                               // by id
  std::vector<std::vector<RequestId>> running_at_creation;  // the others in flight
  std::vector<Operation> ops;                               // every operation, in order
};

// Drives a searcher to its Finish: the oldest running trial reports loss(params) at step 40 and
// closes. With `restore_after`, the searcher is replaced after that many events by a new one
// loaded from its saved state (through text, as the search plan keeps it).
template <typename F>
Outcome drive(const json& spec_json, F loss, size_t restore_after = SIZE_MAX) {
  StudySpec spec = parse_spec(spec_json);
  std::unique_ptr<Searcher> s = make_searcher(spec);
  Outcome run;
  std::deque<RequestId> running;
  auto take = [&](std::vector<Operation> ops) {
    for (Operation& op : ops) {
      if (const Create* c = std::get_if<Create>(&op)) {
        run.trials.push_back(c->params);
        run.losses.push_back(loss(c->params));
        run.running_at_creation.emplace_back(running.begin(), running.end());
        running.push_back(c->trial);
      }
      run.ops.push_back(std::move(op));
    }
  };
  take(s->on_study_start());
  for (size_t events = 0; !running.empty(); ++events) {
    if (events == restore_after) {
      json state = json::parse(s->save().dump());
      s = make_searcher(spec);
      s->load(state);
    }
    RequestId t = running.front();
    running.pop_front();
    take(s->on_validation(t, 40, run.losses[t]));
    take(s->on_trial_closed(t));
  }
  EXPECT_TRUE(!run.ops.empty() && std::holds_alternative<Finish>(run.ops.back()));
  return run;
}

double best(const Outcome& r) {
  return *std::min_element(r.losses.begin(), r.losses.end());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---------------------------------------------------------------------------------------------
// tpe

// Ten startup draws on [0, 1]: the one at the largest x is best, the two at the smallest x next,
// the others far behind. Optuna's good set (a tenth: one trial) sends trial 10 to the largest x;
// gamma 0.25 (three trials, two of them at the small end) sends it to the small end.
TEST(Tpe, GoodSetIsOptunasSize) {
  int default_near_top = 0, quarter_near_bottom = 0;
  for (int seed = 0; seed < 10; ++seed) {
    auto proposal = [&](json options) {
      options.update({{"n_startup", 10}, {"parallel", 1}, {"max_trials", 11}});
      json j = study({{"x", {{"uniform", {0.0, 1.0}}}}}, searcher("tpe", options));
      j["seed"] = seed;
      StudySpec spec = parse_spec(j);
      std::vector<double> xs;
      for (uint64_t i = 0; i < 10; ++i)
        xs.push_back(spec.space.draw(seed, i, std::nullopt)["x"].get<double>());
      std::vector<double> sorted = xs;
      std::sort(sorted.begin(), sorted.end());
      auto loss = [&](const Params& p) {
        double x = p["x"].get<double>();
        return x == sorted[9] ? 0.0 : x == sorted[0] ? 1.0 : x == sorted[1] ? 2.0 : 10.0;
      };
      double x = drive(j, loss).trials.at(10)["x"].get<double>();
      return std::make_pair(std::fabs(x - sorted[9]), std::fabs(x - sorted[0]));
    };
    auto [top, bottom] = proposal(json::object());
    default_near_top += top < bottom;
    auto [top_q, bottom_q] = proposal({{"gamma", 0.25}});
    quarter_near_bottom += bottom_q < top_q;
  }
  EXPECT_GE(default_near_top, 9);
  EXPECT_GE(quarter_near_bottom, 6);
}

TEST(Tpe, DefaultsToOptunasTenStartupDraws) {
  json j = study(unit_square(2), searcher("tpe", {{"parallel", 1}}));
  StudySpec spec = parse_spec(j);
  Outcome r = drive(j, [](const Params& p) { return p["x0"].get<double>(); });
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(r.trials[i], spec.space.draw(7, i, std::nullopt));
  EXPECT_NE(r.trials[10], spec.space.draw(7, 10, std::nullopt));
}

// Every kind of leaf, jointly: proposals differ from the univariate ones after the startup draws,
// each is admitted by the space, and the search still finds the good corner.
TEST(Tpe, MultivariateProposalsAreJointAndValid) {
  json hyper = {{"a", {{"uniform", {0.0, 1.0}}}},
                {"b", {{"loguniform", {0.001, 1.0}}}},
                {"c", {{"int", {1, 8}}}},
                {"d", {{"choice", {"x", "y", "z"}}}},
                {"e", {{"grid", {0.1, 0.5}}}}};
  auto loss = [](const Params& p) {
    return std::pow(p["a"].get<double>() - 0.3, 2) + std::fabs(std::log10(p["b"].get<double>())) +
           0.1 * p["c"].get<int64_t>() + (p["d"] == "y" ? 0 : 1) + (p["e"] == 0.5 ? 0 : 1);
  };
  json options = {{"max_trials", 60}, {"parallel", 1}};
  Outcome uni = drive(study(hyper, searcher("tpe", options)), loss);
  options["multivariate"] = true;
  json j = study(hyper, searcher("tpe", options));
  Outcome multi = drive(j, loss);
  StudySpec spec = parse_spec(j);
  ASSERT_EQ(multi.trials.size(), 60u);
  size_t differ = 0;
  for (size_t i = 0; i < 60; ++i) {
    if (i < 10) {
      EXPECT_EQ(multi.trials[i], uni.trials[i]);
    }
    differ += multi.trials[i] != uni.trials[i];
    for (const Param& leaf : spec.space.params())
      EXPECT_TRUE(leaf.admits(multi.trials[i][leaf.name])) << multi.trials[i];
    EXPECT_NO_THROW(spec.hyperparams(multi.trials[i]));
  }
  EXPECT_EQ(differ, 50u);
  std::vector<double> last(multi.losses.end() - 20, multi.losses.end());
  std::vector<double> first(multi.losses.begin(), multi.losses.begin() + 10);
  EXPECT_LT(median(last), median(first) / 2);
}

// With four in flight, a proposal made while others run keeps away from them under the constant
// liar: fewer proposals land next to a running trial than without it.
TEST(Tpe, ConstantLiarAvoidsRunningTrials) {
  auto loss = [](const Params& p) {
    return std::pow(p["x0"].get<double>() - 0.6, 2) + std::pow(p["x1"].get<double>() - 0.4, 2);
  };
  auto crowding = [&](bool liar) {
    json options = {{"max_trials", 80}, {"parallel", 4}, {"constant_liar", liar}};
    Outcome r = drive(study(unit_square(2), searcher("tpe", options)), loss);
    int near = 0;
    for (size_t i = 10; i < r.trials.size(); ++i)
      for (RequestId other : r.running_at_creation[i])
        near += std::hypot(r.trials[i]["x0"].get<double>() - r.trials[other]["x0"].get<double>(),
                           r.trials[i]["x1"].get<double>() - r.trials[other]["x1"].get<double>()) <
                0.05;
    return std::make_pair(near, r.trials);
  };
  auto [near_liar, with_liar] = crowding(true);
  auto [near_honest, without_liar] = crowding(false);
  EXPECT_NE(with_liar, without_liar);  // running trials change the proposals
  EXPECT_LT(near_liar, near_honest);
}

TEST(Tpe, UnivariateAndMultivariateContinueIdenticallyAfterLoad) {
  json hyper = unit_square(2);
  hyper["m"] = {{"choice", {0.0, 0.9}}};
  auto loss = [](const Params& p) { return p["x0"].get<double>() + (p["m"] == 0.9 ? 0 : 1); };
  for (bool multivariate : {false, true}) {
    json j = study(hyper, searcher("tpe", {{"multivariate", multivariate}, {"n_startup", 4}}));
    Outcome whole = drive(j, loss);
    for (size_t cut : {0, 7, 16, 25}) EXPECT_EQ(drive(j, loss, cut).ops, whole.ops) << cut;
  }
}

TEST(Tpe, NewOptionErrors) {
  json hyper = unit_square(1);
  EXPECT_EQ(spec_error(study(hyper, searcher("tpe", {{"multivariate", "yes"}}))),
            "searcher.multivariate: expected true or false, got \"yes\"");
  EXPECT_EQ(spec_error(study(hyper, searcher("tpe", {{"constant_liar", 1}}))),
            "searcher.constant_liar: expected true or false, got 1");
  EXPECT_EQ(spec_error(study(hyper, searcher("tpe", {{"prior_weight", 0}}))),
            "searcher.prior_weight: expected a number > 0, got 0");
}

// ---------------------------------------------------------------------------------------------
// gp

// Branin on [-5, 10] x [0, 15]; its minimum is 0.397887.
double branin(const Params& p) {
  double x = p["x"].get<double>(), y = p["y"].get<double>();
  double b = 5.1 / (4 * std::numbers::pi * std::numbers::pi), c = 5 / std::numbers::pi;
  return std::pow(y - b * x * x + c * x - 6, 2) +
         10 * (1 - 1 / (8 * std::numbers::pi)) * std::cos(x) + 10;
}

json branin_space() {
  return {{"x", {{"uniform", {-5.0, 10.0}}}}, {"y", {{"uniform", {0.0, 15.0}}}}};
}

// 30 trials on Branin over six seeds: gp's median regret is well below random search's.
TEST(Gp, BeatsRandomOnBranin) {
  std::vector<double> gp, random;
  for (int seed = 0; seed < 6; ++seed) {
    for (const char* name : {"gp", "random"}) {
      json j = study(branin_space(), searcher(name));
      j["seed"] = seed;
      Outcome r = drive(j, branin);
      ASSERT_EQ(r.trials.size(), 30u);
      (name == std::string("gp") ? gp : random).push_back(best(r) - 0.397887);
    }
  }
  EXPECT_LT(median(gp), median(random) / 4) << "gp " << median(gp) << ", random " << median(random);
  EXPECT_LT(median(gp), 0.1);
}

// Int and loguniform leaves come back as integers and in range; running trials (parallel 3) are
// believed at the model's mean, so the proposals made beside them still differ from them.
TEST(Gp, IntAndLogLeavesWithParallelTrials) {
  json hyper = {{"lr", {{"loguniform", {1e-4, 1.0}}}}, {"width", {{"int", {16, 512}}}}};
  json j = study(hyper, searcher("gp", {{"parallel", 3}}));
  StudySpec spec = parse_spec(j);
  auto loss = [](const Params& p) {
    return std::pow(std::log10(p["lr"].get<double>()) + 2, 2) +
           std::pow(std::log2(double(p["width"].get<int64_t>())) - 7, 2);
  };
  Outcome r = drive(j, loss);
  ASSERT_EQ(r.trials.size(), 30u);
  for (size_t i = 0; i < r.trials.size(); ++i) {
    EXPECT_TRUE(r.trials[i]["width"].is_number_integer());
    for (const Param& leaf : spec.space.params())
      EXPECT_TRUE(leaf.admits(r.trials[i][leaf.name])) << r.trials[i];
    for (RequestId other : r.running_at_creation[i]) EXPECT_NE(r.trials[i], r.trials[other]);
  }
  EXPECT_LT(best(r), 0.1);
  EXPECT_EQ(drive(j, loss).ops, r.ops);  // deterministic
}

TEST(Gp, SaveAndLoadContinueIdentically) {
  json j = study(branin_space(), searcher("gp", {{"max_trials", 16}, {"n_startup", 4}}));
  Outcome whole = drive(j, branin);
  for (size_t cut : {0, 5, 9, 14}) EXPECT_EQ(drive(j, branin, cut).ops, whole.ops) << cut;
}

TEST(Gp, OptionErrors) {
  json no_max = study(branin_space(), searcher("gp"));
  no_max["searcher"].erase("max_trials");
  EXPECT_EQ(spec_error(no_max), "searcher.max_trials: missing (gp needs it)");
  EXPECT_EQ(spec_error(study(branin_space(), searcher("gp", {{"max_trials", 301}}))),
            "searcher.max_trials: gp runs at most 300 trials (each proposal costs O(n^3) in the "
            "trials so far), got 301");
  EXPECT_EQ(spec_error(study(branin_space(), searcher("gp", {{"candidates", 0}}))),
            "searcher.candidates: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(spec_error(study(branin_space(), searcher("gp", {{"gamma", 0.1}}))).substr(0, 15),
            "searcher.gamma:");
  json categorical = branin_space();
  categorical["m"] = {{"choice", {0.0, 0.9}}};
  EXPECT_EQ(spec_error(study(categorical, searcher("gp"))),
            "hyperparameters.m: gp searches uniform, loguniform and int leaves only; m is a choice "
            "(tpe handles those)");
}

}  // namespace
}  // namespace hippo
