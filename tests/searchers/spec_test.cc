// Good specs parse into the expected structures; units, lengths and root keys are per trial.
#include "searchers/spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "tests/searchers/spec_helpers.h"
#include "worker/engine/text_data.h"

namespace hippo {
namespace {

using testing::spec_error;

using nlohmann::json;

using testing::example_spec;

TEST(Spec, ExampleParsesIntoItsParts) {
  StudySpec s = load_spec(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-lr-decay.json");
  EXPECT_EQ(s.name, "fmnist-mlp-lr-decay");
  EXPECT_EQ(s.model, json({{"type", "mlp"}, {"hidden", {256, 128}}}));
  EXPECT_EQ(s.data.name, "fashion-mnist");
  EXPECT_EQ(s.data.train_samples, 60000);
  EXPECT_EQ(s.data.eval_samples, 10000);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.fixed["batch_size"], 128);
  EXPECT_EQ(s.fixed["optimizer"], "sgd");
  EXPECT_EQ(s.fixed["momentum"], 0.9);
  EXPECT_EQ(s.fixed["beta2"], 0.999);  // defaults filled in
  EXPECT_EQ(s.fixed["nesterov"], false);
  EXPECT_FALSE(s.fixed.contains("lr"));
  EXPECT_EQ(s.searcher.name, "grid");
  EXPECT_EQ(s.searcher.metric, "accuracy");
  EXPECT_TRUE(s.searcher.maximize);
  EXPECT_EQ(s.searcher.max_trials, 18);
  EXPECT_EQ(s.length.count, 4);
  EXPECT_TRUE(s.length.epochs);
  ASSERT_TRUE(s.eval_every);
  EXPECT_EQ(s.eval_every->count, 1);
  EXPECT_EQ(s.space.names(), (std::vector<std::string>{"lr", "weight_decay"}));
  std::vector<std::string> params;
  for (const Param& p : s.space.params()) params.push_back(p.name);
  EXPECT_EQ(params, (std::vector<std::string>{"lr.init", "lr.milestones[0]", "lr.gamma"}));
  EXPECT_EQ(s.root_key.size(), 16u);

  Params p = {{"lr.init", 0.1}, {"lr.milestones[0]", 2}, {"lr.gamma", 0.1}};
  EXPECT_EQ(s.steps_per_epoch(p), 468);  // floor(60000 / 128)
  EXPECT_EQ(s.length_steps(p), 1872);
  EXPECT_EQ(s.eval_steps(p), (std::vector<int64_t>{468, 936, 1404, 1872}));
}

TEST(Spec, BatchSizeDistributionGivesEachTrialItsUnit) {
  json j = example_spec();
  j["data"]["train_samples"] = 1000;
  j["fixed"].erase("batch_size");
  j["hyperparameters"]["batch_size"] = {{"choice", {64, 128}}};
  j["eval"]["every"] = {{"steps", 10}};
  StudySpec s = parse_spec(j);
  Params p = {{"lr.init", 0.1}, {"lr.milestones[0]", 1}, {"lr.gamma", 0.1}, {"batch_size", 64}};
  EXPECT_EQ(s.steps_per_epoch(p), 15);
  EXPECT_EQ(s.length_steps(p), 60);
  EXPECT_DOUBLE_EQ(s.hyperparams(p).at("lr").value_at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.hyperparams(p).at("lr").value_at(15), 0.1 * 0.1);
  p["batch_size"] = 128;
  EXPECT_EQ(s.steps_per_epoch(p), 7);
  EXPECT_EQ(s.length_steps(p), 28);
  EXPECT_EQ(s.eval_steps(p), (std::vector<int64_t>{10, 20, 28}));
  EXPECT_DOUBLE_EQ(s.hyperparams(p).at("lr").value_at(7), 0.1 * 0.1);
  EXPECT_EQ(s.hyperparams(p).at("batch_size"), Sequence::constant(128));
}

// A study budget: steps or seconds, one of them, named by its path when wrong; no part of the
// root key (it changes no training).
TEST(Spec, BudgetIsStepsOrSeconds) {
  json j = json::parse(std::ifstream(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-ci.json"));
  const std::string root_key = parse_spec(j).root_key;
  j["budget"] = {{"steps", 500}};
  EXPECT_EQ(parse_spec(j).budget_steps, 500);
  EXPECT_EQ(parse_spec(j).root_key, root_key);
  j["budget"] = {{"wall_s", 2.5}};
  EXPECT_EQ(parse_spec(j).budget_wall_s, 2.5);
  j["budget"] = json::object();
  EXPECT_EQ(spec_error(j), "budget: expected {\"steps\": N} or {\"wall_s\": T}, got {}");
  j["budget"] = {{"steps", 0}};
  EXPECT_EQ(spec_error(j).rfind("budget.steps: expected an integer in [1, ", 0), 0u)
      << spec_error(j);
  j["budget"] = {{"wall_s", -1}};
  EXPECT_EQ(spec_error(j), "budget.wall_s: expected a number of seconds > 0, got -1");
  j["budget"] = {{"minutes", 3}};
  EXPECT_EQ(spec_error(j), "budget.minutes: unknown field");
}

TEST(Spec, NoEvalMeansTheEndOnly) {
  json j = example_spec();
  j.erase("eval");
  j["length"] = {{"steps", 500}};
  StudySpec s = parse_spec(j);
  EXPECT_EQ(s.eval_steps(Params::object()), (std::vector<int64_t>{500}));
}

TEST(Spec, BetasAliasSetsBeta1AndBeta2) {
  json j = example_spec();
  j["fixed"]["betas"] = {0.8, 0.99};
  EXPECT_EQ(parse_spec(j).fixed["beta1"], 0.8);
  EXPECT_EQ(parse_spec(j).fixed["beta2"], 0.99);
  j["fixed"].erase("betas");
  j["hyperparameters"]["betas"] = {0.9, {{"grid", {0.99, 0.999}}}};
  StudySpec s = parse_spec(j);
  EXPECT_EQ(s.space.names(), (std::vector<std::string>{"beta1", "beta2", "lr", "weight_decay"}));
  EXPECT_EQ(s.space.params()[0].name, "beta2");
  j["hyperparameters"]["betas"][1] = {{"grid", {0.99, 2}}};
  EXPECT_EQ(spec_error(j).rfind("hyperparameters.betas[1].grid[1]: expected a number in [0, 1]", 0),
            0u);
}

TEST(Spec, RootKeyDependsOnWhatChangesTrainingOnly) {
  json j = example_spec();
  const std::string key = parse_spec(j).root_key;
  json other = j;
  other["name"] = "another";
  other["searcher"] = {{"name", "random"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 3}};
  other["length"] = {{"steps", 100}};
  other.erase("eval");
  other["hyperparameters"]["lr"] = {{"grid", {0.3, 0.2}}};  // same names, other values
  other["fixed"]["nesterov"] = false;                       // the default, written out
  EXPECT_EQ(parse_spec(other).root_key, key);
  for (auto change : std::vector<std::function<void(json&)>>{
           [](json& s) { s["seed"] = 1; },
           [](json& s) { s["fixed"]["momentum"] = 0.8; },
           [](json& s) { s["model"]["hidden"] = {256}; },
           [](json& s) { s["data"]["train_samples"] = 1024; },
           [](json& s) {
             s["hyperparameters"]["momentum"] = 0.9;
             s["fixed"].erase("momentum");
           },
       }) {
    json changed = j;
    change(changed);
    EXPECT_NE(parse_spec(changed).root_key, key) << changed.dump();
  }
}

TEST(Spec, ExternalModelsTakeAnySetting) {
  json j = {
      {"name", "ext"},
      {"model", {{"type", "external"}, {"command", {"python3", "train.py"}}}},
      {"data", {{"name", "fashion-mnist"}}},
      {"fixed", {{"dropout", 0.1}, {"activation", "gelu"}, {"batch_size", 100}}},
      {"hyperparameters",
       {{"width", {{"int", {16, 64}}}}, {"act", {{"choice", {"relu", "tanh"}}}}}},
      {"searcher", {{"name", "random"}, {"metric", "val_f1"}, {"mode", "max"}, {"max_trials", 2}}},
      {"length", {{"epochs", 2}}}};
  StudySpec s = parse_spec(j);
  EXPECT_TRUE(s.external_model());
  EXPECT_EQ(s.fixed["activation"], "gelu");
  EXPECT_FALSE(s.fixed.contains("momentum"));  // no built-in defaults
  EXPECT_EQ(s.length_steps(Params::object()), 1200);
  Hyperparams h = s.hyperparams({{"width", 20}, {"act", "tanh"}});
  EXPECT_EQ(h.at("act"), Sequence::text("tanh"));
  EXPECT_EQ(h.at("width"), Sequence::constant(20));
  j["fixed"]["batch_size"] = "big";  // batch_size keeps its meaning: epochs are made of it
  EXPECT_EQ(spec_error(j).rfind("fixed.batch_size: expected an integer", 0), 0u);
}

// An external model's data: any name, its sizes only where the study needs them, and any other
// fields for the trainer; fixed settings of any JSON; long_lived changes no result.
TEST(Spec, ExternalModelsTakeTheirOwnDataAndSettings) {
  json j = {
      {"name", "own"},
      {"model", {{"type", "external"}, {"command", {"/usr/bin/python3", "lm.py"}}}},
      {"data", {{"name", "my-corpus"}, {"path", "/data/corpus.txt"}, {"lowercase", true}}},
      {"fixed", {{"layers", {64, 64}}, {"tokenizer", {{"kind", "bytes"}}}, {"batch_size", 8}}},
      {"hyperparameters", {{"lr", {{"grid", {0.1, 0.01}}}}}},
      {"searcher", {{"name", "grid"}, {"metric", "perplexity"}, {"mode", "min"}}},
      {"length", {{"steps", 100}}},
      {"eval", {{"every", {{"steps", 50}}}}}};
  StudySpec s = parse_spec(j);
  EXPECT_EQ(s.data.name, "my-corpus");
  EXPECT_EQ(s.data.train_samples, 0);  // not given: lengths are in steps
  EXPECT_EQ(s.data.fields, json({{"path", "/data/corpus.txt"}, {"lowercase", true}}));
  EXPECT_EQ(s.fixed["layers"], json({64, 64}));
  EXPECT_EQ(s.fixed["tokenizer"], json({{"kind", "bytes"}}));
  EXPECT_EQ(s.eval_steps(Params::object()), std::vector<int64_t>({50, 100}));

  json other = j;  // other data fields: another root key
  other["data"]["lowercase"] = false;
  EXPECT_NE(parse_spec(other).root_key, s.root_key);
  other = j;  // one stage per process or many: the same results, the same tree
  other["model"]["long_lived"] = true;
  EXPECT_EQ(parse_spec(other).root_key, s.root_key);
  EXPECT_EQ(parse_spec(other).model["long_lived"], true);

  auto refused = [&](const std::function<void(json&)>& change) {
    json k = j;
    change(k);
    return spec_error(k);
  };
  EXPECT_EQ(refused([](json& k) {
              k["length"] = {{"epochs", 2}};
            }),
            "length.epochs: epoch units are not possible here: data.train_samples is not given "
            "(an epoch is floor(train_samples / batch_size) steps)");
  EXPECT_EQ(refused([](json& k) {
              k["hyperparameters"]["lr"] = {{"schedule", "step_decay"},
                                            {"unit", "epoch"},
                                            {"init", 0.1},
                                            {"every", 1},
                                            {"gamma", 0.5}};
            }).rfind("hyperparameters.lr.unit: epoch units are not possible here: data.train", 0),
            0u);
  EXPECT_EQ(refused([](json& k) {
              k["searcher"] = {{"name", "asha"},
                               {"metric", "loss"},
                               {"mode", "min"},
                               {"max_trials", 4},
                               {"min_length", {{"epochs", 1}}}};
            }).rfind("searcher.min_length.epochs: epoch units are not possible here: data.", 0),
            0u);
  // With train_samples, epochs are possible again.
  json sized = j;
  sized["data"]["train_samples"] = 80;
  sized["length"] = {{"epochs", 2}};
  EXPECT_EQ(parse_spec(sized).length_steps(Params::object()), 20);
  EXPECT_EQ(refused([](json& k) {
              k["fixed"]["dropout"] = {{"uniform", {0.1, 0.2}}};
            }),
            "fixed.dropout: expected a value, got {\"uniform\":[0.1,0.2]} (schedules and "
            "distributions go under hyperparameters)");
  EXPECT_EQ(refused([](json& k) {
              k["fixed"]["dropout"] = nullptr;
            }).rfind("fixed.dropout: expected a value, got null", 0),
            0u);
  EXPECT_EQ(refused([](json& k) { k["model"]["long_lived"] = "yes"; }),
            "model.long_lived: expected true or false, got \"yes\"");
  EXPECT_EQ(refused([](json& k) {
              k["data"]["name"] = "";
            }).rfind("data.name: expected a name of 1 to 64 characters", 0),
            0u);
  EXPECT_EQ(refused([](json& k) {
              k["data"]["train_samples"] = 0;
            }).rfind("data.train_samples: expected an integer in [1, ", 0),
            0u);
  // Built-in models keep their strict checks.
  json builtin = example_spec();
  builtin["data"]["path"] = "/x";
  EXPECT_EQ(spec_error(builtin), "data.path: unknown field");
  builtin = example_spec();
  builtin["fixed"]["hidden"] = {1, 2};
  EXPECT_EQ(spec_error(builtin).rfind("fixed.hidden: unknown setting \"hidden\"", 0), 0u);
}

TEST(Spec, NonFiniteNumbersAreRefused) {
  // JSON text cannot carry NaN or infinities (the parser refuses 1e999), but a spec built in
  // memory can.
  json j = example_spec();
  j["fixed"]["momentum"] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(spec_error(j).rfind("fixed.momentum: expected a finite number", 0), 0u)
      << spec_error(j);
  j = example_spec();
  j["hyperparameters"]["lr"]["gamma"] = {{"grid", {0.1, std::numeric_limits<double>::infinity()}}};
  EXPECT_EQ(spec_error(j).rfind("hyperparameters.lr.gamma.grid[1]: expected a finite number", 0),
            0u)
      << spec_error(j);
  EXPECT_THROW(parse_spec_text(R"({"name": 1e999})"), SpecError);
}

TEST(Spec, MissingFileNamesTheFile) {
  try {
    load_spec("/nonexistent/spec.json");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/spec.json: cannot read: No such file or directory");
  }
}

// The gpt example: the model with every field, the fortunes windows of its context as the
// sample counts (worker/engine/text_data.h's), and micro-batches in the root key.
TEST(Spec, GptExampleParses) {
  StudySpec s = load_spec(HIPPO_SOURCE_DIR "/examples/gpt-fortunes-pipeline.json");
  EXPECT_EQ(s.model, json({{"type", "gpt"},
                           {"layers", 2},
                           {"heads", 4},
                           {"dim", 64},
                           {"context", 64},
                           {"vocab", 96},
                           {"tied", true}}));
  EXPECT_EQ(s.data.name, "fortunes");
  EXPECT_EQ(s.data.train_samples, worker::text_samples(worker::kFortunesTrainTokens, 64));
  EXPECT_EQ(s.data.eval_samples, 32);
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/gpt-fortunes-pipeline.json");
  json spec = json::parse(in);
  spec["data"].erase("eval_samples");
  spec["model"]["context"] = 32;
  EXPECT_EQ(parse_spec(spec).data.eval_samples,
            worker::text_samples(worker::kFortunesEvalTokens, 32));
  spec["model"]["tied"] = true;  // the default, written out: the same model and root key
  const std::string key = parse_spec(spec).root_key;
  spec["model"].erase("tied");
  EXPECT_EQ(parse_spec(spec).root_key, key);
  spec["model"]["tied"] = false;
  EXPECT_NE(parse_spec(spec).root_key, key);
  spec["model"]["tied"] = 1;
  EXPECT_EQ(spec_error(spec), "model.tied: expected true or false, got 1");
}

// The fortunes text in bpe32k's subwords: its own sample counts and vocabulary, and a root key
// apart from the characters'.
TEST(Spec, GptOverBpe32kHasItsOwnWindowsVocabularyAndRootKey) {
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/gpt-fortunes-pipeline.json");
  json spec = json::parse(in);
  spec["data"].erase("eval_samples");
  const std::string characters = parse_spec(spec).root_key;
  spec["data"]["tokenizer"] = "bpe32k";
  EXPECT_EQ(spec_error(spec),
            "model.vocab: the fortunes data has 32768 tokens, more than a vocabulary of 96");
  spec["model"]["vocab"] = 32768;
  StudySpec s = parse_spec(spec);
  EXPECT_EQ(s.data.train_samples, worker::text_samples(worker::kFortunesBpe32kTrainTokens, 64));
  EXPECT_EQ(s.data.eval_samples, worker::text_samples(worker::kFortunesBpe32kEvalTokens, 64));
  EXPECT_EQ(s.data.fields, json({{"tokenizer", "bpe32k"}}));
  spec["data"].erase("tokenizer");
  EXPECT_NE(s.root_key, parse_spec(spec).root_key);
  EXPECT_NE(s.root_key, characters);
  spec["data"]["tokenizer"] = "bpe64k";
  EXPECT_EQ(spec_error(spec).rfind("data.tokenizer: unknown tokenizer \"bpe64k\"", 0), 0u);
  spec["data"] = {{"name", "fashion-mnist"}, {"tokenizer", "bpe32k"}};
  spec["model"] = {{"type", "mlp"}, {"hidden", {16}}};
  spec.erase("pipeline");
  EXPECT_EQ(spec_error(spec), "data.tokenizer: only the fortunes text takes a tokenizer");
}

// "pipeline.vocab_parallel": checked (a boolean, the schedule, whole vocabulary blocks per stage,
// a transformer block per position) and, giving the same results, not part of the root key.
TEST(Spec, VocabParallelIsCheckedAndKeepsTheRootKey) {
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/gpt-fortunes-pipeline.json");
  json spec = json::parse(in);
  spec["data"]["tokenizer"] = "bpe32k";
  spec["model"]["vocab"] = 32768;
  spec["model"]["layers"] = 4;
  const std::string key = parse_spec(spec).root_key;
  spec["pipeline"]["vocab_parallel"] = true;
  const StudySpec s = parse_spec(spec);
  EXPECT_TRUE(s.pipeline.vocab_parallel);
  EXPECT_EQ(s.root_key, key);
  spec["model"]["layers"] = 1;
  EXPECT_EQ(spec_error(spec),
            "pipeline.vocab_parallel: 2 pipeline positions (stages x chunks) for 1 transformer "
            "blocks: each position needs one");
  spec["pipeline"]["stages"] = 10;
  spec["pipeline"]["microbatches"] = 10;
  spec["model"]["layers"] = 12;
  spec["fixed"]["batch_size"] = 20;
  EXPECT_EQ(spec_error(spec),
            "pipeline.vocab_parallel: a vocabulary of 32768 tokens is 8 blocks of 4096, fewer "
            "than the 10 stages");
  spec["pipeline"] = {{"stages", 2}, {"schedule", "gpipe"}, {"vocab_parallel", true}};
  EXPECT_EQ(spec_error(spec),
            "pipeline.vocab_parallel: needs at least 2 stages and the 1f1b or interleaved "
            "schedule, got 2 stages of gpipe");
  spec["pipeline"] = {{"stages", 2}, {"vocab_parallel", "yes"}};
  EXPECT_EQ(spec_error(spec), "pipeline.vocab_parallel: expected true or false, got \"yes\"");
}

}  // namespace
}  // namespace hippo

namespace hippo {
namespace {

TEST(Spec, OneMetricAndModeIsOneObjectiveWithoutConstraints) {
  StudySpec s = parse_spec(testing::example_spec());
  ASSERT_EQ(s.searcher.goals.objectives.size(), 1u);
  EXPECT_EQ(s.searcher.goals.objectives[0], (Objective{"accuracy", true}));
  EXPECT_FALSE(s.searcher.goals.multi());
  EXPECT_EQ(s.searcher.metric, "accuracy");
  EXPECT_TRUE(s.searcher.maximize);
}

TEST(Spec, ObjectivesAndConstraintsAreReadInOrder) {
  nlohmann::json j = testing::example_spec();
  j["searcher"].erase("metric");
  j["searcher"].erase("mode");
  j["searcher"]["objectives"] = {{{"metric", "loss"}, {"mode", "min"}},
                                 {{"metric", "params"}, {"mode", "min"}}};
  j["searcher"]["constraints"] = {{{"metric", "accuracy"}, {"min", 0.5}},
                                  {{"metric", "loss"}, {"min", 0.1}, {"max", 0.9}}};
  StudySpec s = parse_spec(j);
  const Goals& g = s.searcher.goals;
  EXPECT_TRUE(g.several());
  EXPECT_EQ(g.directions(), (std::vector<bool>{false, false}));
  EXPECT_EQ(g.metrics(), (std::vector<std::string>{"loss", "params", "accuracy"}));
  EXPECT_EQ(s.searcher.metric, "loss");  // the first objective's, for searchers of one
  EXPECT_FALSE(s.searcher.maximize);
  ASSERT_EQ(g.constraints.size(), 2u);
  EXPECT_EQ(g.constraints[0].violation(0.5), 0);  // bounds are inclusive
  EXPECT_DOUBLE_EQ(g.constraints[0].violation(0.25), 0.25);
  EXPECT_DOUBLE_EQ(g.constraints[1].violation(1.5), 0.6);
  EXPECT_TRUE(std::isinf(g.constraints[1].violation(NAN)));
  // A stored spec reads the same (the history queries).
  EXPECT_EQ(goals_of(j).objectives, g.objectives);
  EXPECT_EQ(goals_of(j).constraints, g.constraints);
  // Objectives change what is searched, never how a trial trains: the root key stays.
  EXPECT_EQ(s.root_key, parse_spec(testing::example_spec()).root_key);
}

TEST(Spec, OneObjectiveInTheListFormIsAcceptedByEverySearcher) {
  nlohmann::json j = testing::example_spec();
  j["searcher"] = {{"name", "tpe"},
                   {"objectives", {{{"metric", "loss"}, {"mode", "min"}}}},
                   {"constraints", {{{"metric", "accuracy"}, {"min", 0.6}}}},
                   {"max_trials", 4}};
  StudySpec s = parse_spec(j);
  EXPECT_FALSE(s.searcher.goals.several());
  EXPECT_TRUE(s.searcher.goals.multi());
}

}  // namespace
}  // namespace hippo
