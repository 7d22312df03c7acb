// The Searcher interface: grid and random operations, save/load, and the registry.
#include "searchers/searcher.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using nlohmann::json;

using testing::example_spec;

std::vector<Create> creates(const std::vector<Operation>& ops) {
  std::vector<Create> out;
  for (const Operation& op : ops)
    if (const Create* c = std::get_if<Create>(&op)) out.push_back(*c);
  return out;
}

TEST(GridSearcher, CreatesAndTrainsEveryGridPoint) {
  StudySpec spec = parse_spec(example_spec());
  std::vector<Operation> ops = make_searcher(spec)->on_study_start();
  ASSERT_EQ(ops.size(), 36u);
  for (int64_t i = 0; i < 18; ++i) {
    const Create& c = std::get<Create>(ops[2 * i]);
    EXPECT_EQ(c.trial, i);
    EXPECT_EQ(c.params, spec.space.draw(0, i, i));
    EXPECT_EQ(std::get<Train>(ops[2 * i + 1]),
              (Train{i, 1872, std::vector<int64_t>{468, 936, 1404, 1872}}));
  }
  json capped = example_spec();
  capped["searcher"]["max_trials"] = 5;
  EXPECT_EQ(creates(make_searcher(parse_spec(capped))->on_study_start()).size(), 5u);
  capped["searcher"].erase("max_trials");
  EXPECT_EQ(creates(make_searcher(parse_spec(capped))->on_study_start()).size(), 18u);
}

json random_spec(int seed) {
  json j = example_spec();
  j["seed"] = seed;
  j["hyperparameters"]["lr"]["init"] = {{"loguniform", {0.001, 0.1}}};
  j["searcher"] = {{"name", "random"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 6}};
  return j;
}

TEST(RandomSearcher, SameSeedSameTrials) {
  std::vector<Create> a = creates(make_searcher(parse_spec(random_spec(3)))->on_study_start());
  std::vector<Create> b = creates(make_searcher(parse_spec(random_spec(3)))->on_study_start());
  std::vector<Create> c = creates(make_searcher(parse_spec(random_spec(4)))->on_study_start());
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i].params, c[i].params);
  std::set<json> distinct;
  for (const Create& x : a) distinct.insert(x.params);
  EXPECT_EQ(distinct.size(), 6u);
}

TEST(Searchers, SaveAndLoadContinueIdentically) {
  for (const json& j : {example_spec(), random_spec(1)}) {
    StudySpec spec = parse_spec(j);
    std::unique_ptr<Searcher> a = make_searcher(spec);
    a->on_study_start();
    for (int64_t t : {3, 0, 5}) {
      EXPECT_TRUE(a->on_validation(t, 468, 0.5).empty());
      EXPECT_TRUE(a->on_trial_closed(t).empty());
    }
    EXPECT_TRUE(a->on_trial_failed(1).empty());
    std::unique_ptr<Searcher> b = make_searcher(spec);
    b->load(json::parse(a->save().dump()));  // through text, as the search plan keeps it
    EXPECT_EQ(b->save(), a->save());
    const std::set<int64_t> done = {0, 1, 3, 5};
    int64_t n = spec.searcher.max_trials.value(), last_open = n - 1;
    while (done.count(last_open)) --last_open;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<Operation> ops_a = a->on_trial_closed(t), ops_b = b->on_trial_closed(t);
      EXPECT_EQ(ops_a, ops_b);
      EXPECT_EQ(ops_a.empty(), t < last_open) << t;  // Finish once every trial is closed
    }
    EXPECT_EQ(a->on_trial_closed(0), std::vector<Operation>{Finish{}});
  }
}

TEST(Searchers, RefuseBadStateAndUnknownTrials) {
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(example_spec()));
  EXPECT_THROW(s->load({{"closed", {18}}}), SpecError);
  EXPECT_THROW(s->load({{"closed", {0}}, {"extra", 1}}), SpecError);
  EXPECT_THROW(s->load(json::array()), SpecError);
  EXPECT_THROW(s->on_trial_closed(18), std::invalid_argument);
  EXPECT_THROW(s->on_trial_failed(-1), std::invalid_argument);
}

// A plug-in searcher, registered the way a user's C++ file would: it stops every trial at its
// first validation below `threshold`.
class ThresholdSearcher : public Searcher {
 public:
  explicit ThresholdSearcher(const StudySpec& spec) {
    json value = spec.searcher.options.value("threshold", json(0.5));
    threshold_ = Field(value, "searcher.threshold").number();
  }
  std::vector<Operation> on_study_start() override {
    return {Create{0, Params::object(), std::nullopt}, Train{0, 100, {50, 100}}};
  }
  std::vector<Operation> on_validation(RequestId trial, int64_t, double value) override {
    if (value < threshold_) return {Stop{trial}};
    return {};
  }
  std::vector<Operation> on_trial_closed(RequestId) override { return {Finish{}}; }
  std::vector<Operation> on_trial_failed(RequestId) override { return {Finish{}}; }
  json save() const override { return json::object(); }
  void load(const json&) override {}

 private:
  double threshold_ = 0;
};

SearcherRegistrar registrar("threshold_test", {{"threshold"}, [](const StudySpec& s) {
                                                 return std::make_unique<ThresholdSearcher>(s);
                                               }});

TEST(Registry, PluginSearchersAreMadeByName) {
  json j = example_spec();
  j["searcher"] = {
      {"name", "threshold_test"}, {"metric", "accuracy"}, {"mode", "max"}, {"threshold", 0.7}};
  std::unique_ptr<Searcher> s = make_searcher(parse_spec(j));
  EXPECT_EQ(s->on_validation(0, 50, 0.6), std::vector<Operation>{Stop{0}});
  EXPECT_TRUE(s->on_validation(0, 50, 0.8).empty());
  j["searcher"]["threshold"] = "high";  // the plug-in validates its own options
  EXPECT_THROW(
      {
        try {
          parse_spec(j);
        } catch (const SpecError& e) {
          EXPECT_STREQ(e.what(), "searcher.threshold: expected a number, got \"high\"");
          throw;
        }
      },
      SpecError);
  EXPECT_THROW(register_searcher("threshold_test", {}), std::invalid_argument);
  EXPECT_THROW(register_searcher("grid", {}), std::invalid_argument);
}

}  // namespace
}  // namespace hippo
