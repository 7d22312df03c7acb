// Budgets (searchers/budget.h): what a study may ask of a master, checked before anything is made,
// with the JSON path of what is too large; and the grid's trials given in batches.
#include "searchers/budget.h"

#include <gtest/gtest.h>

#include "searchers/searcher.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using nlohmann::json;
using testing::example_spec;

// The SpecError of check_budget, or "accepted".
std::string budget_error(const json& spec, const Budget& budget = {}) {
  try {
    check_budget(parse_spec(spec), budget);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "accepted";
}

// A grid of `leaves` hyper-parameters of 10 values each.
json grid(int leaves) {
  json s = example_spec();
  s["hyperparameters"] = json::object();
  s["fixed"].erase("momentum");
  const char* names[] = {"lr", "momentum", "weight_decay", "beta1", "beta2", "eps"};
  for (int i = 0; i < leaves; ++i)
    s["hyperparameters"][names[i]] = {
        {"grid", {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1}}};
  s["searcher"].erase("max_trials");
  return s;
}

TEST(Budget, TheExampleFitsTheDefaults) {
  StudySpec spec = parse_spec(example_spec());
  EXPECT_EQ(longest_trial(spec), 1872);  // 4 epochs of 468 steps
  EXPECT_EQ(most_evaluations(spec), 4);
  EXPECT_LT(job_bytes(spec), 4096);
  EXPECT_EQ(budget_error(example_spec()), "accepted");
}

// With length.end_of a trial is as long as its cooldown: the budget counts the latest one the
// leaves allow (it counted none, and let any number of steps through).
TEST(Budget, PerTrialLengthsCountTheLatestCooldown) {
  json s = example_spec();
  s["hyperparameters"] = {{"lr",
                           {{"schedule", "wsd"},
                            {"unit", "epoch"},
                            {"peak", 0.1},
                            {"warmup", 0},
                            {"decay_start", {{"int", {1, 3}}}},
                            {"decay", {{"grid", {1, 2}}}},
                            {"final", 0.0},
                            {"shape", "linear"}}}};
  s["searcher"] = {{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 8}};
  s["length"] = {{"end_of", "lr"}};
  StudySpec spec = parse_spec(s);
  EXPECT_EQ(longest_trial(spec), 5 * 468);  // 3 + 2 epochs of 468 steps
  EXPECT_EQ(most_evaluations(spec), 5);
  s["hyperparameters"]["lr"]["unit"] = "step";
  s["hyperparameters"]["lr"]["decay_start"] = {{"int", {1, 1000000000}}};
  s["searcher"]["max_trials"] = 100;
  std::string e = budget_error(s);
  EXPECT_EQ(e.rfind("length: 100 trials of up to 1000000002 steps", 0), 0u) << e;
}

TEST(Budget, TooManyTrialsAreRefusedWithTheirPath) {
  EXPECT_EQ(budget_error(grid(4)), "accepted");  // 10^4: the default limit
  std::string e = budget_error(grid(5));
  EXPECT_EQ(e.rfind("searcher.max_trials: the study would create 100000 trials", 0), 0u) << e;
  EXPECT_NE(e.find("--max-trials"), std::string::npos) << e;
  EXPECT_EQ(budget_error(grid(5), {.trials = 100000}), "accepted");
  json random = example_spec();
  random["searcher"] = {
      {"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 1000000000}};
  EXPECT_EQ(budget_error(random).rfind("searcher.max_trials: ", 0), 0u);
  // Searchers that decide their trials tell how many they may make.
  json pbt = example_spec();
  pbt["hyperparameters"] = {{"lr", {{"loguniform", {0.01, 0.1}}}}};
  pbt["searcher"] = {{"name", "pbt"},   {"metric", "accuracy"},        {"mode", "max"},
                     {"population", 8}, {"interval", {{"epochs", 1}}}, {"fraction", 0.25}};
  // 4 generations; failed members are replaced too: at most all but one in each later one.
  EXPECT_EQ(make_searcher(parse_spec(pbt))->most_trials(), 8u + 3u * 7u);
  pbt["searcher"]["population"] = 100000;
  EXPECT_EQ(budget_error(pbt).rfind("searcher.max_trials: ", 0), 0u);
}

TEST(Budget, StepsEvaluationsAndJobSizeAreBounded) {
  json endless = example_spec();
  endless["searcher"]["max_trials"] = 1;
  endless["length"] = {{"steps", 1000000000000}};
  endless["eval"] = {{"every", {{"steps", 1}}}};
  std::string e = budget_error(endless);  // decided without making 10^12 evaluation steps
  EXPECT_EQ(e.rfind("length: 1 trials of up to 1000000000000 steps", 0), 0u) << e;
  EXPECT_NE(e.find("--max-steps"), std::string::npos) << e;

  json often = example_spec();  // 18 trials of 1872 steps, evaluated at every one
  often["eval"] = {{"every", {{"steps", 1}}}};
  EXPECT_EQ(budget_error(often), "accepted");
  e = budget_error(often, {.evaluations = 10000});
  EXPECT_EQ(e.rfind("eval.every: 18 trials of up to 1872 evaluations", 0), 0u) << e;

  json heavy = example_spec();  // 3 * 10^6 evaluations: a job of more than 16 MiB
  heavy["searcher"]["max_trials"] = 1;
  heavy["length"] = {{"steps", 3000000}};
  heavy["eval"] = {{"every", {{"steps", 1}}}};
  e = budget_error(heavy, {.evaluations = 10000000});
  EXPECT_EQ(e.rfind("eval.every: a trial's job would take", 0), 0u) << e;
  EXPECT_GT(job_bytes(parse_spec(heavy)), kMaxJobBytes);
}

TEST(Budget, EpochsCountWithTheSmallestBatch) {
  json s = example_spec();
  s["fixed"].erase("batch_size");
  s["hyperparameters"]["batch_size"] = {{"grid", {32, 256}}};
  StudySpec spec = parse_spec(s);
  EXPECT_EQ(longest_trial(spec), 4 * (60000 / 32));
  EXPECT_EQ(most_evaluations(spec), 4);
}

TEST(GridBatches, ALargeGridIsGivenABatchAtATime) {
  StudySpec spec = parse_spec(grid(4));  // 10^4 trials
  std::unique_ptr<Searcher> searcher = make_searcher(spec);
  EXPECT_EQ(searcher->most_trials(), 10000u);
  std::vector<Operation> first = searcher->on_study_start();
  EXPECT_EQ(first.size(), 2 * kTrialBatch);  // Create and Train per trial
  json saved = searcher->save();
  EXPECT_EQ(saved["created"], kTrialBatch);
  std::vector<Operation> second = searcher->next_batch();
  ASSERT_EQ(second.size(), 2 * kTrialBatch);
  EXPECT_EQ(std::get<Create>(second.front()).trial, static_cast<RequestId>(kTrialBatch));
  EXPECT_EQ(std::get<Create>(second.front()).params, spec.space.draw(0, kTrialBatch, kTrialBatch));
  // A restarted master continues after the last batch the plan took.
  std::unique_ptr<Searcher> restarted = make_searcher(spec);
  restarted->load(saved);
  EXPECT_EQ(restarted->next_batch(), second);
  size_t trials = 2 * kTrialBatch;
  for (std::vector<Operation> ops = searcher->next_batch(); !ops.empty();
       ops = searcher->next_batch())
    trials += ops.size() / 2;
  EXPECT_EQ(trials, 10000u);
  // A state saved before batches (no "created") has every trial created.
  std::unique_ptr<Searcher> old = make_searcher(spec);
  old->load({{"closed", json::array()}});
  EXPECT_TRUE(old->next_batch().empty());
}

}  // namespace
}  // namespace hippo
