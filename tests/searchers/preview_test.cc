// End to end: the real `hippo preview` binary on the real example specs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>

#include "searchers/searcher.h"
#include "tests/searchers/run_hippo.h"

namespace {

using hippo::testing::hippo;
using hippo::testing::last_line;
using hippo::testing::Outcome;

const std::string kExamples = HIPPO_SOURCE_DIR "/examples/";

TEST(Preview, ExampleCountsAreExact) {
  // No search plan at --db: nothing kept by earlier studies to reuse (tests/e2e/retention_test.cc
  // previews against one).
  Outcome run = hippo("--db /nonexistent/plan.db preview --format json " + kExamples +
                      "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(run.status, 0) << run.output;
  nlohmann::json out = nlohmann::json::parse(last_line(run.output));
  EXPECT_EQ(out, nlohmann::json({{"study", "fmnist-mlp-lr-decay"},
                                 {"trials", 18},
                                 {"steps_trial_based", 33696},
                                 {"steps_unique", 21060},
                                 {"steps_reused", 0},
                                 {"critical_path_steps", 1872}}));
}

TEST(Preview, TableAndCsv) {
  Outcome table = hippo("preview " + kExamples + "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("18 trials:"), std::string::npos) << table.output;
  // Trials are numbered from 1, as in the study (`hippo trials`; tests/e2e/cli_test.cc).
  EXPECT_NE(table.output.find("[468, 1872) lr=0.01 weight_decay=0.0005  <- trial 1\n"),
            std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("trial-based 33696, unique 21060"), std::string::npos);

  Outcome csv = hippo("--format csv preview " + kExamples + "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(csv.status, 0) << csv.output;
  EXPECT_EQ(csv.output.substr(0, csv.output.find('\n')),
            "trial,length,lr.init,lr.milestones[0],lr.gamma");
  EXPECT_EQ(csv.output.substr(csv.output.find('\n') + 1, 2), "1,") << csv.output;
  EXPECT_NE(csv.output.find("\n8,1872,0.05,3,0.1\n"), std::string::npos) << csv.output;
  EXPECT_EQ(std::count(csv.output.begin(), csv.output.end(), '\n'), 19);
}

TEST(Preview, EveryExampleIsAccepted) {
  for (const char* name :
       {"fmnist-mlp-lr-decay.json", "fmnist-mlp-random.json", "fmnist-mlp-ci.json"}) {
    Outcome run = hippo("preview --format json " + kExamples + name);
    EXPECT_EQ(run.status, 0) << name << ": " << run.output;
  }
}

// The unique steps of trials counted step by step: at each step, the trials still training fall
// into groups whose sequences agreed at every step so far (a refinement by the values at that
// step); each group trains that step once. No divergence(), no tree: a check on both.
int64_t brute_force_unique_steps(const std::vector<hippo::Hyperparams>& hps,
                                 const std::vector<int64_t>& lengths) {
  std::vector<int64_t> group(hps.size(), 0);  // trials with equal histories share a group
  int64_t longest = *std::max_element(lengths.begin(), lengths.end()), unique = 0;
  for (int64_t step = 0; step < longest; ++step) {
    std::map<std::pair<int64_t, std::string>, int64_t> refined;
    for (size_t i = 0; i < hps.size(); ++i) {
      if (step >= lengths[i]) continue;
      std::string values;  // the bits of every value at this step
      for (const auto& [name, seq] : hps[i]) {
        if (seq.is_text()) {
          values += seq.text_value() + ";";
          continue;
        }
        double v = seq.value_at(step);
        values.append(reinterpret_cast<const char*>(&v), sizeof v);
      }
      auto [it, fresh] = refined.emplace(std::make_pair(group[i], values), refined.size());
      group[i] = it->second;
    }
    unique += static_cast<int64_t>(refined.size());
  }
  return unique;
}

// docs/spec.md's wsd sweeps: random cooldown starts, lengths, shapes, warmups and peaks, as grids
// or distributions, in steps or epochs, each trial to its own end or to a fixed length. preview's
// counts must equal the brute-force count of the trials the searcher makes.
TEST(Preview, WsdSweepCountsEqualABruteForceCount) {
  std::mt19937_64 rng(2026);
  auto one = [&](std::initializer_list<nlohmann::json> options) {
    return options.begin()[rng() % options.size()];
  };
  for (int round = 0; round < 24; ++round) {
    bool drawn = round % 3 == 2;  // random search over distributions, else a grid
    nlohmann::json lr = {
        {"schedule", "wsd"},
        {"unit", round % 4 == 3 ? "epoch" : "step"},
        {"peak", one({0.003, {{"grid", {0.003, 0.001}}}, {{"uniform", {0.001, 0.01}}}})},
        {"warmup", one({0, 3, {{"grid", {0, 2}}}, {{"int", {1, 4}}}})},
        {"decay_start", one({{{"grid", {6, 12, 18}}}, {{"int", {5, 15}}}, 8})},
        {"decay", one({{{"grid", {2, 5}}}, {{"int", {1, 6}}}, 4})},
        {"final", one({0.0, 0.0003, {{"grid", {0.0, 0.0003}}}})},
        {"shape", one({"linear",
                       {{"grid", {"linear", "cosine", "1-sqrt"}}},
                       {{"choice", {"cosine", "1-sqrt"}}}})}};
    if (!drawn)  // a grid searcher takes grid leaves and constants only
      for (auto& [key, value] : lr.items())
        if (value.is_object() && !value.contains("grid")) value = value.begin().value()[0];
    const bool end_of = round % 2 == 0;
    nlohmann::json spec = {
        {"name", "wsd-sweep"},
        {"model", {{"type", "mlp"}, {"hidden", {8}}}},
        {"data", {{"name", "fashion-mnist"}, {"train_samples", 64}, {"eval_samples", 64}}},
        {"fixed", {{"batch_size", 32}, {"optimizer", "sgd"}}},  // an epoch: 2 steps
        {"hyperparameters", {{"lr", lr}, {"momentum", {{"grid", {0.0, 0.9}}}}}},
        {"searcher",
         drawn ? nlohmann::json{{"name", "random"},
                                {"metric", "accuracy"},
                                {"mode", "max"},
                                {"max_trials", 12}}
               : nlohmann::json{{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}}},
        {"length", end_of ? nlohmann::json{{"end_of", "lr"}} : nlohmann::json{{"steps", 64}}}};
    SCOPED_TRACE(spec.dump());
    const std::string file = ::testing::TempDir() + "wsd-sweep.json";
    std::ofstream(file) << spec.dump();
    Outcome run = hippo("--db /nonexistent/plan.db preview --format json " + file);
    ASSERT_EQ(run.status, 0) << run.output;
    nlohmann::json out = nlohmann::json::parse(last_line(run.output));

    hippo::StudySpec parsed = hippo::parse_spec(spec);
    std::vector<hippo::Hyperparams> hps;
    std::vector<int64_t> lengths;
    for (const hippo::Operation& op : hippo::make_searcher(parsed)->on_study_start())
      if (const auto* c = std::get_if<hippo::Create>(&op)) {
        hps.push_back(parsed.hyperparams(c->params));
        lengths.push_back(parsed.length_steps(c->params));
      }
    ASSERT_EQ(out["trials"], hps.size());
    EXPECT_EQ(out["steps_trial_based"],
              std::accumulate(lengths.begin(), lengths.end(), int64_t(0)));
    EXPECT_EQ(out["steps_unique"], brute_force_unique_steps(hps, lengths));
    EXPECT_EQ(out["critical_path_steps"], *std::max_element(lengths.begin(), lengths.end()));
  }
}

TEST(Preview, BadInputExitsTwoWithThePath) {
  Outcome bad =
      hippo("preview " HIPPO_SOURCE_DIR "/tests/searchers/bad_specs/25-gamma-string.json");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.output,
            "error: hyperparameters.lr.gamma: expected a number or a distribution, got \"x\"\n");
  Outcome missing = hippo("preview /nonexistent/study.json");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("/nonexistent/study.json"), std::string::npos) << missing.output;
}

}  // namespace
