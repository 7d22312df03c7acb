// The search space: grid enumeration, seeded draws, and instantiation into sequences.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <numeric>
#include <set>

#include "searchers/spec.h"

namespace hippo {
namespace {

using nlohmann::json;

SearchSpace space_of(const json& hyperparameters, bool builtin = true) {
  SpaceRules rules;
  rules.builtin = builtin;
  return SearchSpace(setting_fields(Field(hyperparameters, "hyperparameters")), rules);
}

TEST(Space, ExampleGridIsTheFullProductInGridOrder) {
  StudySpec s = load_spec(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-lr-decay.json");
  ASSERT_EQ(s.space.grid_size(), 18u);
  std::set<std::tuple<double, int64_t, double>> seen;
  for (uint64_t i = 0; i < 18; ++i) {
    Params p = s.space.draw(s.seed, i, i);
    ASSERT_EQ(p.size(), 3u);
    seen.insert({p["lr.init"].get<double>(), p["lr.milestones[0]"].get<int64_t>(),
                 p["lr.gamma"].get<double>()});
  }
  std::set<std::tuple<double, int64_t, double>> product;
  for (double init : {0.1, 0.05, 0.02})
    for (int64_t m : {1, 2, 3})
      for (double gamma : {0.1, 0.3}) product.insert({init, m, gamma});
  EXPECT_EQ(seen, product);
  // The first leaf varies fastest.
  EXPECT_EQ(s.space.draw(0, 7, 7),
            json({{"lr.init", 0.05}, {"lr.milestones[0]", 3}, {"lr.gamma", 0.1}}));
}

TEST(Space, InstantiateAppliesUnitsAndSchedules) {
  StudySpec s = load_spec(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-lr-decay.json");
  Hyperparams h =
      s.space.instantiate({{"lr.init", 0.1}, {"lr.milestones[0]", 2}, {"lr.gamma", 0.3}}, 468);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.at("lr"), multistep(0.1, {936}, 0.3));
  EXPECT_EQ(h.at("weight_decay"), Sequence::constant(0.0005));

  SearchSpace nested = space_of(json::parse(R"({
    "lr": {"schedule": "warmup_linear", "unit": "epoch", "init": 0.1, "warmup": 1,
           "after": {"schedule": "piecewise", "points": [[0, 0.1], [2, {"grid": [0.01, 0.02]}]]}},
    "momentum": {"schedule": "cosine", "init": 0.9, "final": 0.5, "length": 100}})"));
  ASSERT_EQ(nested.params().size(), 1u);
  EXPECT_EQ(nested.params()[0].name, "lr.after.points[1][1]");
  Hyperparams n = nested.instantiate({{"lr.after.points[1][1]", 0.02}}, 10);
  EXPECT_EQ(n.at("lr"), warmup_linear(0.1, 10, piecewise({{0, 0.1}, {20, 0.02}})));
  EXPECT_EQ(n.at("momentum"), cosine(0.9, 0.5, 100));
}

TEST(Space, InstantiateRefusesParamsFromOutsideTheSpace) {
  SearchSpace s = space_of({{"lr", {{"uniform", {0.01, 0.1}}}},
                            {"batch_size", {{"int", {16, 64}}}},
                            {"optimizer", {{"choice", {"sgd", "adam"}}}}});
  json good = {{"lr", 0.05}, {"batch_size", 32}, {"optimizer", "adam"}};
  EXPECT_NO_THROW(s.instantiate(good, 1));
  auto error = [&](json p) {
    try {
      s.instantiate(p, 1);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  json p = good;
  p.erase("lr");
  EXPECT_EQ(error(p), "lr: missing parameter");
  p = good;
  p["lr"] = 0.5;
  EXPECT_EQ(error(p), "lr: value 0.5 is not in its range");
  p = good;
  p["optimizer"] = "rmsprop";
  EXPECT_EQ(error(p), "optimizer: value \"rmsprop\" is not in its range");
  p = good;
  p["batch_size"] = 32.5;
  EXPECT_EQ(error(p), "batch_size: value 32.5 is not in its range");
  p = good;
  p["extra"] = 1;
  EXPECT_EQ(error(p), "extra: unknown parameter");
}

TEST(Space, DrawsAreReproducibleAndInRange) {
  SearchSpace s = space_of({{"lr", {{"loguniform", {1e-4, 1e-1}}}},
                            {"batch_size", {{"int", {16, 19}}}},
                            {"momentum", {{"uniform", {0.5, 0.9}}}},
                            {"optimizer", {{"grid", {"sgd", "adam"}}}}});
  std::set<int64_t> batch_sizes;
  std::set<std::string> optimizers;
  double log_sum = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    Params p = s.draw(42, i, std::nullopt);
    EXPECT_EQ(p, s.draw(42, i, std::nullopt));
    EXPECT_NE(p, s.draw(43, i, std::nullopt));
    double lr = p["lr"].get<double>();
    ASSERT_TRUE(lr >= 1e-4 && lr <= 1e-1) << lr;
    log_sum += std::log10(lr);
    ASSERT_TRUE(p["momentum"].get<double>() >= 0.5 && p["momentum"].get<double>() < 0.9);
    ASSERT_TRUE(p["batch_size"].is_number_integer());
    batch_sizes.insert(p["batch_size"].get<int64_t>());
    optimizers.insert(p["optimizer"].get<std::string>());
    EXPECT_NO_THROW(s.instantiate(p, 1));
  }
  EXPECT_EQ(batch_sizes, (std::set<int64_t>{16, 17, 18, 19}));  // both ends are reached
  EXPECT_EQ(optimizers, (std::set<std::string>{"sgd", "adam"}));
  EXPECT_NEAR(log_sum / n, -2.5, 0.1);  // log-uniform: the mean exponent is the middle
}

TEST(Space, GridPointsDrawTheirOtherLeaves) {
  SearchSpace s =
      space_of({{"lr", {{"grid", {0.1, 0.01}}}}, {"momentum", {{"uniform", {0.5, 0.9}}}}});
  EXPECT_EQ(s.grid_size(), 2u);
  Params a = s.draw(0, 0, 0), b = s.draw(0, 1, 1);
  EXPECT_EQ(a["lr"], 0.1);
  EXPECT_EQ(b["lr"], 0.01);
  EXPECT_NE(a["momentum"], b["momentum"]);
  EXPECT_EQ(space_of(json::object()).grid_size(), 1u);
  json huge = json::object();  // 100^10 points, more than 2^64
  std::vector<int> values(100);
  std::iota(values.begin(), values.end(), 0);
  for (char name = 'a'; name < 'a' + 10; ++name) huge[std::string(1, name)] = {{"grid", values}};
  EXPECT_EQ(space_of(huge, false).grid_size(), UINT64_MAX);
}

// An example of each schedule of the parser's table with every numeric field a constant: values
// are fractions, lengths integers (so that the walk below can tell them apart).
json example_schedule(const ScheduleShape& shape) {
  using K = ScheduleField;
  json s = {{"schedule", shape.name}, {"unit", "step"}};
  double value = 0.5;
  int64_t from0 = 2;  // wsd: warmup 2, decay_start 4 (each may grow by one and stay in order)
  for (const ScheduleField& f : shape.fields) {
    std::string key(f.name);
    switch (f.kind) {
      case K::kValue:
        s[key] = value;
        value /= 2;
        break;
      case K::kFactor:
        s[key] = 0.5;
        break;
      case K::kUnits:
        s[key] = 3;
        break;
      case K::kUnitsFrom0:
        s[key] = from0;
        from0 += 2;
        break;
      case K::kShape:
        s[key] = "cosine";
        break;
      case K::kUnitsList:
        s[key] = {2, 4};
        break;
      case K::kPoints:
        s[key] = {{0, 0.5}, {3, 0.25}};
        break;
      case K::kAfter:
        for (const ScheduleShape& other : schedule_shapes())
          if (other.name == "cosine") s[key] = example_schedule(other);
        break;
    }
  }
  return s;
}

// Every number inside a JSON value, by its pointer.
void numbers_in(const json& v, const json::json_pointer& at, std::vector<json::json_pointer>* out) {
  if (v.is_number()) out->push_back(at);
  if (v.is_object())
    for (const auto& [key, child] : v.items()) numbers_in(child, at / key, out);
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) numbers_in(v[i], at / i, out);
}

// The leaf name of a field: lr.points[1][0] for /points/1/0.
std::string leaf_name(const json::json_pointer& at) {
  std::string name = "lr", text = at.to_string();
  size_t start = 1;
  while (start <= text.size()) {
    size_t end = text.find('/', start);
    if (end == std::string::npos) end = text.size();
    std::string token = text.substr(start, end - start);
    name += std::isdigit(static_cast<unsigned char>(token[0])) ? "[" + token + "]" : "." + token;
    start = end + 1;
  }
  return name;
}

// docs/spec.md: every numeric field of every schedule may be a number or a distribution (an
// integer one where the field is a length). Walks every number of every schedule of the parser's
// own table: as a grid of two values it makes two trials whose sequences differ; a length refuses
// a uniform distribution; the first point of a piecewise schedule must start at 0.
TEST(Space, EveryNumericFieldOfEveryScheduleTakesADistribution) {
  size_t fields = 0;
  for (const ScheduleShape& shape : schedule_shapes()) {
    const json schedule = example_schedule(shape);
    SCOPED_TRACE(schedule.dump());
    ASSERT_EQ(space_of({{"lr", schedule}}).grid_size(), 1u);
    std::vector<json::json_pointer> numbers;
    numbers_in(schedule, json::json_pointer(), &numbers);
    ASSERT_FALSE(numbers.empty());
    for (const json::json_pointer& at : numbers) {
      SCOPED_TRACE(at.to_string());
      ++fields;
      const json v = schedule[at];
      const bool length = v.is_number_integer();
      json with = schedule;
      if (at.to_string() == "/points/0/0") {  // a first start other than 0 is refused
        with[at] = {{"grid", {0, 1}}};
        EXPECT_THROW(
            {
              try {
                space_of({{"lr", with}});
              } catch (const SpecError& e) {
                EXPECT_STREQ(e.what(),
                             "hyperparameters.lr.points[0][0]: the first point must start at 0");
                throw;
              }
            },
            SpecError);
        continue;
      }
      with[at] = {{"grid", {v, length ? json(v.get<int64_t>() + 1) : json(v.get<double>() / 2)}}};
      SearchSpace space = space_of({{"lr", with}});
      ASSERT_EQ(space.grid_size(), 2u);
      ASSERT_EQ(space.params().size(), 1u);
      EXPECT_EQ(space.params()[0].name, leaf_name(at));
      Params a = space.draw(0, 0, 0), b = space.draw(0, 1, 1);
      EXPECT_NE(space.instantiate(a, 10).at("lr"), space.instantiate(b, 10).at("lr"));
      if (length) {
        with[at] = {{"uniform", {1, 3}}};
        EXPECT_THROW(space_of({{"lr", with}}), SpecError);
        with[at] = {{"int", {v.get<int64_t>(), v.get<int64_t>() + 1}}};
        EXPECT_EQ(space_of({{"lr", with}}).params()[0].kind, DistKind::kInt);
      } else {
        with[at] = {{"uniform", {0.1, 0.2}}};
        EXPECT_EQ(space_of({{"lr", with}}).params()[0].kind, DistKind::kUniform);
      }
    }
  }
  EXPECT_GE(fields, 20u);
}

// Drawn piecewise starts: every trial's starts must increase, so neighbouring ranges may not
// overlap.
TEST(Space, PiecewiseStartsMayBeDrawnWithoutOverlap) {
  json points = {{0, 0.1}, {{{"grid", {2, 3}}}, 0.05}, {{{"int", {4, 6}}}, 0.01}};
  SearchSpace space = space_of({{"lr", {{"schedule", "piecewise"}, {"points", points}}}});
  EXPECT_EQ(space.grid_size(), 2u);
  Hyperparams h = space.instantiate({{"lr.points[1][0]", 3}, {"lr.points[2][0]", 5}}, 10);
  EXPECT_EQ(h.at("lr").value_at(2), 0.1);
  EXPECT_EQ(h.at("lr").value_at(3), 0.05);
  EXPECT_EQ(h.at("lr").value_at(5), 0.01);
  points[2][0] = {{"int", {3, 6}}};
  try {
    space_of({{"lr", {{"schedule", "piecewise"}, {"points", points}}}});
    FAIL() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(),
                 "hyperparameters.lr.points[2][0]: point starts must increase: this point may "
                 "start at 3, the one before at 3");
  }
}

}  // namespace
}  // namespace hippo
