// Architectures in the search space: fields of a built-in model written as distributions are
// leaves of the space ("model.hidden"), each value checked by the model's own rules, and each
// architecture is a root key of its own. (Malformed ones: bad_specs/8x-model-leaf-*.)
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

using nlohmann::json;
using testing::spec_error;

json example(const std::string& file) {
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/" + file);
  return json::parse(in);
}

// The CI example (lr init x every grid) with two architectures.
json two_mlps() {
  json j = example("fmnist-mlp-ci.json");
  j["model"]["hidden"] = {{"grid", {{16}, {32, 16}}}};
  return j;
}

std::vector<std::string> leaf_names(const StudySpec& s) {
  std::vector<std::string> names;
  for (const Param& p : s.space.params()) names.push_back(p.name);
  return names;
}

TEST(Architecture, ModelLeavesComeLastAndVarySlowestInTheGrid) {
  const StudySpec s = parse_spec(two_mlps());
  EXPECT_EQ(leaf_names(s), (std::vector<std::string>{"lr.init", "lr.every", "model.hidden"}));
  EXPECT_TRUE(s.space.params().back().in_model());
  EXPECT_EQ(s.space.names(), std::vector<std::string>{"lr"});  // no hyper-parameter of its own
  ASSERT_EQ(s.space.grid_size(), 8u);
  for (uint64_t i = 0; i < 8; ++i)
    EXPECT_EQ(s.space.draw(s.seed, i, i)["model.hidden"], i < 4 ? json{16} : (json{32, 16})) << i;
  // The other leaves' draws are what they are without the model's.
  json fixed = two_mlps();
  fixed["model"]["hidden"] = {16};
  const StudySpec without = parse_spec(fixed);
  for (uint64_t i = 0; i < 8; ++i) {
    Params p = s.space.draw(3, i, std::nullopt);
    p.erase("model.hidden");
    EXPECT_EQ(p, without.space.draw(3, i, std::nullopt));
  }
}

TEST(Architecture, EachArchitectureIsTheRootKeyOfTheSameModelWrittenOut) {
  const StudySpec s = parse_spec(two_mlps());
  ASSERT_EQ(s.architectures.size(), 2u);
  std::set<std::string> keys;
  for (const json& hidden : {json{16}, json{32, 16}}) {
    const Params p = {{"lr.init", 0.1}, {"lr.every", 2}, {"model.hidden", hidden}};
    json written = two_mlps();
    written["model"]["hidden"] = hidden;
    const StudySpec alone = parse_spec(written);
    EXPECT_EQ(s.model_of(p), alone.model);
    EXPECT_EQ(s.root_key_of(p), alone.root_key);
    EXPECT_EQ(s.model_with_root_key(alone.root_key), alone.model);
    keys.insert(s.root_key_of(p));
    // The sequences are the hyper-parameters' only.
    EXPECT_EQ(s.hyperparams(p), alone.hyperparams({{"lr.init", 0.1}, {"lr.every", 2}}));
    EXPECT_EQ(s.hyperparams(p).count("model.hidden"), 0u);
  }
  EXPECT_EQ(keys.size(), 2u);
  // The spec's own key hashes the model as written: no trial has it.
  EXPECT_EQ(keys.count(s.root_key), 0u);
  EXPECT_THROW(s.model_with_root_key(s.root_key), std::invalid_argument);
  // A trial's params must give the model its values.
  EXPECT_THROW(s.root_key_of({{"lr.init", 0.1}, {"lr.every", 2}}), SpecError);
  EXPECT_THROW(s.root_key_of({{"lr.init", 0.1}, {"lr.every", 2}, {"model.hidden", {64}}}),
               SpecError);
}

// Without model leaves a spec's root keys are what they were before architectures could be drawn
// (the keys of existing plans; these are those of the commit before), and every trial has it.
TEST(Architecture, WithoutModelLeavesRootKeysAreUnchanged) {
  const std::map<std::string, std::string> kBefore = {
      {"fmnist-mlp-lr-decay.json", "e747333ffb822c79"},
      {"gpt-fortunes-wsd.json", "c7955c4b4d4346a9"},
      {"fmnist-cnn-cosine.json", "6b461d941a6b9119"},
      {"external-trainer.json", "8f36ddbe99a10793"}};
  for (const auto& [file, key] : kBefore) {
    SCOPED_TRACE(file);
    const StudySpec s = parse_spec(example(file));
    EXPECT_EQ(s.root_key, key);
    ASSERT_EQ(s.architectures.size(), 1u);
    EXPECT_EQ(s.architectures.begin()->first, key);
    EXPECT_EQ(s.architectures.begin()->second, s.model);
    for (uint64_t i = 0; i < 3; ++i)
      EXPECT_EQ(s.root_key_of(s.space.draw(s.seed, i, std::nullopt)), key);
  }
}

TEST(Architecture, CnnAndGptFieldsMayBeDrawn) {
  json cnn = example("fmnist-cnn-cosine.json");
  cnn["model"]["channels"] = {{"choice", {{8}, {16, 32}}}};
  StudySpec c = parse_spec(cnn);
  EXPECT_EQ(c.architectures.size(), 2u);
  EXPECT_EQ(c.space.params().back().kind, DistKind::kChoice);

  json gpt = example("gpt-fortunes-wsd.json");
  gpt["model"]["layers"] = {{"int", {1, 3}}};
  gpt["model"]["heads"] = {{"grid", {2, 4}}};
  gpt["model"]["tied"] = {{"choice", {true, false}}};
  StudySpec g = parse_spec(gpt);
  EXPECT_EQ(g.architectures.size(), 3u * 2 * 2);
  Params p = g.space.draw(g.seed, 0, 0);
  EXPECT_EQ(p["model.heads"], 2);
  EXPECT_EQ(p["model.layers"].get<int64_t>() >= 1 && p["model.layers"].get<int64_t>() <= 3, true);
  json model = g.model_of(p);
  EXPECT_EQ(model["heads"], 2);
  EXPECT_EQ(model["layers"], p["model.layers"]);
  EXPECT_EQ(model["tied"], p["model.tied"]);
  EXPECT_EQ(model["dim"], 64);
  EXPECT_EQ(g.model_with_root_key(g.root_key_of(p)), model);
}

// Searchers treat model leaves as they treat any leaf of their kind (grid, choice: categorical;
// int: an integer); gp refuses grid and choice ones at the model field (bad_specs/94).
TEST(Architecture, TpeLearnsWhichArchitectureIsBetter) {
  json j = two_mlps();
  j["hyperparameters"]["lr"] = {{"loguniform", {0.01, 0.3}}};
  j["searcher"] = {{"name", "tpe"},    {"metric", "accuracy"}, {"mode", "max"},
                   {"max_trials", 20}, {"parallel", 1},        {"n_startup", 4}};
  const StudySpec s = parse_spec(j);
  std::unique_ptr<Searcher> searcher = make_searcher(s);
  std::vector<json> proposed;  // model.hidden of each trial, in order
  std::vector<Operation> ops = searcher->on_study_start();
  while (proposed.size() < 20) {
    const Create* created = nullptr;
    for (const Operation& op : ops)
      if (const Create* c = std::get_if<Create>(&op)) created = c;
    ASSERT_NE(created, nullptr);
    s.hyperparams(created->params);  // every leaf in its range
    const json hidden = created->params.at("model.hidden");
    proposed.push_back(hidden);
    // The larger model does better, whatever the learning rate.
    const RequestId trial = created->trial;
    searcher->on_validation(trial, 96, hidden.size() == 2 ? 0.9 : 0.5);
    ops = searcher->on_trial_closed(trial);
  }
  const auto large = std::count(proposed.begin() + 10, proposed.end(), json{32, 16});
  EXPECT_GE(large, 8) << "of the last 10 proposals";
  EXPECT_NE(std::find(proposed.begin(), proposed.end(), json{16}), proposed.end());
}

TEST(Architecture, GpSearchesAnIntegerModelField) {
  json j = example("gpt-fortunes-wsd.json");
  j["model"]["layers"] = {{"int", {1, 3}}};
  j["hyperparameters"]["lr"] = {{"loguniform", {0.001, 0.01}}};
  j["length"] = {{"steps", 40}};
  j["searcher"] = {{"name", "gp"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 4}};
  const StudySpec s = parse_spec(j);
  std::unique_ptr<Searcher> searcher = make_searcher(s);
  for (const Operation& op : searcher->on_study_start()) {
    if (const Create* c = std::get_if<Create>(&op)) {
      EXPECT_EQ(s.model_of(c->params)["layers"], c->params["model.layers"]);
    }
  }
}

}  // namespace
}  // namespace hippo
