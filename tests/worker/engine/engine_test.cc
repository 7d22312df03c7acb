// Exactness of the engine on small runs of every model: training 0 -> N in
// one call equals any split at k through a copy (fork), a checkpoint, or a fresh process with
// another thread count, bit for bit; forked children equal the trials trained alone. Plus the
// settings and state checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "tests/worker/engine/recipe.h"
#include "worker/engine/network.h"
#include "worker/engine/rng.h"
#include "worker/engine/step_settings.h"

namespace hippo::worker {
namespace {

using testing::recipe_fixed;
using testing::recipe_hp;
using testing::small_config;

constexpr int64_t kSteps = 12;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("hippo_engine_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TrainState train_alone(Engine& engine, const Hyperparams& hp, const nlohmann::json& fixed,
                       int64_t to) {
  TrainState s = engine.initial_state();
  engine.train(s, to, hp, fixed, {});
  return s;
}

void expect_same_metrics(const Metrics& a, const Metrics& b) {
  EXPECT_EQ(a.accuracy, b.accuracy);
  EXPECT_EQ(a.loss, b.loss);
}

struct Case {
  std::string model, optimizer;
};

class ExactnessTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExactnessTest, SplitRunsEqualOneRun) {
  const auto [model, optimizer] = GetParam();
  Engine engine(small_config(model), 1);
  const Hyperparams hp = recipe_hp(0.05);
  const nlohmann::json fixed = recipe_fixed(optimizer);
  const TrainState whole = train_alone(engine, hp, fixed, kSteps);
  EXPECT_EQ(whole.step, kSteps);
  EXPECT_EQ(whole.optimizer, optimizer);
  const Metrics whole_metrics = engine.evaluate(whole);
  EXPECT_GT(whole_metrics.loss, 0);

  for (int64_t k : {1, 5, 7, 11}) {
    SCOPED_TRACE("split at " + std::to_string(k));
    TrainState head = train_alone(engine, hp, fixed, k);
    // In memory: a fork is a copy.
    TrainState copy = head;
    engine.train(copy, kSteps, hp, fixed, {});
    EXPECT_TRUE(copy == whole);
    // Through a checkpoint, in another engine of the same config.
    const std::string path = temp_path("split.ckpt");
    save_checkpoint(path, head, engine.config_hash());
    Engine other(small_config(model), 2);
    TrainState loaded =
        load_checkpoint(path, other.checkpoint_shape(k, hp, fixed), other.backend());
    EXPECT_TRUE(loaded == head);
    other.train(loaded, kSteps, hp, fixed, {});
    EXPECT_TRUE(loaded == whole);
    expect_same_metrics(other.evaluate(loaded), whole_metrics);
    std::filesystem::remove(path);
  }
}

// 0 -> k here, k -> N in a fresh process with 2 threads (this one uses 1).
TEST_P(ExactnessTest, FreshProcessContinuesBitForBit) {
  const auto [model, optimizer] = GetParam();
  Engine engine(small_config(model), 1);
  const TrainState whole = train_alone(engine, recipe_hp(0.05), recipe_fixed(optimizer), kSteps);
  const Metrics whole_metrics = engine.evaluate(whole);
  for (int64_t k : {3, 8}) {
    SCOPED_TRACE("split at " + std::to_string(k));
    const std::string in = temp_path("in.ckpt"), out = temp_path("out.ckpt");
    save_checkpoint(in, train_alone(engine, recipe_hp(0.05), recipe_fixed(optimizer), k),
                    engine.config_hash());
    const std::string command = std::string(ENGINE_HELPER) + " " + model + " " + optimizer +
                                " 0.05 2 " + in + " " + std::to_string(k) + " " +
                                std::to_string(kSteps) + " " + out + " > " + out + ".json";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const CheckpointShape shape =
        engine.checkpoint_shape(kSteps, recipe_hp(0.05), recipe_fixed(optimizer));
    EXPECT_TRUE(load_checkpoint(out, shape, engine.backend()) == whole);
    std::ifstream metrics(out + ".json");
    const nlohmann::json m = nlohmann::json::parse(metrics);
    EXPECT_EQ(m["accuracy"].get<double>(), whole_metrics.accuracy);
    EXPECT_EQ(m["loss"].get<double>(), whole_metrics.loss);
    for (const std::string& p : {in, out, out + ".json"}) std::filesystem::remove(p);
  }
}

// A worker lends a job the cores of its idle neighbours and takes them back between two steps
// (Engine::set_threads from the job's after_step): the same bits as one thread all along. On
// models of a real study's size (the small ones' products are too small to be cut for threads),
// with the thread count changed mid-epoch and after an evaluation.
TEST(EngineThreads, ThreadsChangedBetweenStepsTrainTheSameBits) {
  RunConfig cnn = small_config("cnn"), mlp = small_config("mlp"), gpt = small_config("gpt");
  cnn.model = {{"type", "cnn"}, {"channels", {16, 32}}, {"fc", {64}}};
  mlp.model = {{"type", "mlp"}, {"hidden", {256, 128}}};
  gpt.model["dim"] = 64;
  gpt.model["context"] = 32;
  for (const RunConfig& config : {cnn, mlp, gpt}) {
    SCOPED_TRACE(config.model.dump());
    const Hyperparams hp{{"lr", Sequence::constant(0.05)}, {"batch_size", Sequence::constant(64)}};
    const nlohmann::json fixed = recipe_fixed("sgd");
    constexpr int64_t kLength = 5;
    Engine one(config, 1);
    const TrainState whole = train_alone(one, hp, fixed, kLength);
    Engine lent(config, 2);
    TrainState s = lent.initial_state();
    lent.train(s, 3, hp, fixed, [&](const StepDone& at) {
      lent.set_threads(at.step() == 1 ? 1 : 2);
      return true;
    });
    const Metrics between = lent.evaluate(s);  // at 2 threads
    lent.set_threads(1);
    EXPECT_EQ(between.loss, one.evaluate(train_alone(one, hp, fixed, 3)).loss);
    lent.train(s, kLength, hp, fixed, [&](const StepDone& at) {
      lent.set_threads(at.step() % 2 ? 2 : 1);
      return true;
    });
    EXPECT_EQ(lent.backend()->threads(), 2);
    EXPECT_TRUE(s == whole);
    expect_same_metrics(lent.evaluate(s), one.evaluate(whole));
  }
}

// A parent trained to k and forked into two children with different learning rates from k on
// equals each child's trial trained alone from step 0.
TEST_P(ExactnessTest, ForkedChildrenEqualTrialsTrainedAlone) {
  const auto [model, optimizer] = GetParam();
  Engine engine(small_config(model), 2);
  const nlohmann::json fixed = recipe_fixed(optimizer);
  for (int64_t k : {2, 6}) {
    SCOPED_TRACE("fork at " + std::to_string(k));
    auto trial = [&](double late_lr) {
      return Hyperparams{{"lr", piecewise({{0, 0.05}, {k, late_lr}})},
                         {"batch_size", Sequence::constant(32)}};
    };
    TrainState parent = train_alone(engine, trial(0.02), fixed, k);
    TrainState a = parent, b = parent;
    engine.train(a, kSteps, trial(0.02), fixed, {});
    engine.train(b, kSteps, trial(0.1), fixed, {});
    EXPECT_TRUE(a == train_alone(engine, trial(0.02), fixed, kSteps));
    EXPECT_TRUE(b == train_alone(engine, trial(0.1), fixed, kSteps));
    EXPECT_FALSE(a.params == b.params);
  }
}

// The CPU kernels of every instruction set this machine runs (cpu:portable, cpu:avx2,
// cpu:avx512) train the same bits, also across thread counts and a split through a checkpoint.
TEST_P(ExactnessTest, EveryCpuInstructionSetTrainsTheSameBits) {
  const auto [model, optimizer] = GetParam();
  const Hyperparams hp = recipe_hp(0.05);
  const nlohmann::json fixed = recipe_fixed(optimizer);
  Engine portable(small_config(model), 1, "cpu:portable");
  const TrainState whole = train_alone(portable, hp, fixed, kSteps);
  const Metrics whole_metrics = portable.evaluate(whole);
  for (const char* device : {"cpu:avx2", "cpu:avx512"}) {
    SCOPED_TRACE(device);
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(small_config(model), 2, device);
    } catch (const std::invalid_argument& e) {  // this CPU lacks the instruction set
      std::cout << "skipping " << device << ": " << e.what() << std::endl;
      continue;
    }
    TrainState head = train_alone(*engine, hp, fixed, 5);
    const std::string path = temp_path("isa.ckpt");
    save_checkpoint(path, head, engine->config_hash());
    TrainState loaded =
        load_checkpoint(path, portable.checkpoint_shape(5, hp, fixed), portable.backend());
    portable.train(loaded, kSteps, hp, fixed, {});  // continued on the portable kernels
    EXPECT_TRUE(loaded == whole);
    engine->train(head, kSteps, hp, fixed, {});
    EXPECT_TRUE(head == whole);
    expect_same_metrics(engine->evaluate(head), whole_metrics);
    std::filesystem::remove(path);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExactnessTest,
                         ::testing::Values(Case{"mlp", "sgd"}, Case{"cnn", "sgd"},
                                           Case{"mlp", "adam"}, Case{"mlp", "adamw"},
                                           Case{"cnn", "adamw"}, Case{"gpt", "sgd"},
                                           Case{"gpt", "adamw"}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.optimizer;
                         });

// The image networks' fused SGD step (Network::sgd_step: each layer steps as soon as its gradient
// is known, the mlp's weights in the product's epilogue) equals gradients() then the backend's
// sgd_update, bit for bit: each model, each variant of SGD, each instruction set, 1 and 3 threads,
// over steps with momentum built up.
TEST(FusedSgdTest, SgdStepEqualsGradientsThenUpdate) {
  for (const std::string model : {"mlp", "cnn"})
    for (const kernels::SgdParams hp :
         {kernels::SgdParams{.lr = 0.05f, .weight_decay = 1e-3f},
          kernels::SgdParams{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f},
          kernels::SgdParams{.lr = 0.05f, .momentum = 0.9f, .nesterov = true}})
      for (const char* device : {"cpu:portable", "cpu:avx2", "cpu:avx512"})
        for (int threads : {1, 3}) {
          SCOPED_TRACE(model + " on " + device + " with " + std::to_string(threads) +
                       " threads, momentum " + std::to_string(hp.momentum) +
                       (hp.nesterov ? " nesterov" : ""));
          std::shared_ptr<const kernels::Backend> be;
          try {
            be = kernels::make_backend(device, threads);
          } catch (const std::invalid_argument& e) {  // this CPU lacks the instruction set
            std::cout << "skipping " << device << ": " << e.what() << std::endl;
            continue;
          }
          const RunConfig config = small_config(model);
          auto fused = make_network(config, be), parts = make_network(config, be);
          const int64_t n = fused->param_count();
          std::vector<float> init(n);
          fused->init(config.seed, init.data());
          auto p_fused = kernels::Buffer<float>::from_host(be, init.data(), n);
          auto p_parts = kernels::Buffer<float>::from_host(be, init.data(), n);
          kernels::Buffer<float> m_fused(be, n), m_parts(be, n), g_fused(be, n), g_parts(be, n);
          const int batch = 24;
          std::vector<int32_t> indices(batch);
          for (int step = 0; step < 3; ++step) {
            for (int b = 0; b < batch; ++b) indices[b] = (step * 37 + b * 7) % 200;
            ASSERT_TRUE(fused->sgd_step(p_fused.data(), indices.data(), batch, g_fused.data(),
                                        m_fused.data(), hp));
            parts->gradients(p_parts.data(), indices.data(), batch, 1, g_parts.data());
            be->sgd_update(p_parts.data(), g_parts.data(), m_parts.data(), n, hp);
            EXPECT_TRUE(p_fused == p_parts) << "parameters after step " << step;
            EXPECT_TRUE(m_fused == m_parts) << "momentum after step " << step;
          }
        }
}

// What a checkpoint is checked against is what training holds, at every step: batch sizes that
// drop the end of an epoch (48 of 200 samples) and change mid-epoch (to 30 at step 6), each
// optimizer.
TEST(EngineTest, CheckpointShapeIsWhatTrainingHolds) {
  Engine engine(small_config("mlp"), 1);
  const Hyperparams hp = {{"lr", Sequence::constant(0.05)},
                          {"batch_size", piecewise({{0, 48}, {6, 30}})}};
  for (const std::string optimizer : {"sgd", "adam"}) {
    const nlohmann::json fixed = recipe_fixed(optimizer);
    TrainState s = engine.initial_state();
    for (int64_t step = 0; step <= 14; ++step) {
      if (step > 0) engine.train(s, step, hp, fixed, {});
      const CheckpointShape shape = engine.checkpoint_shape(step, hp, fixed);
      EXPECT_EQ(shape.step, s.step);
      EXPECT_EQ(shape.data_position, s.data_position) << "step " << step;
      EXPECT_EQ(shape.rng_counter, s.rng_counter);
      EXPECT_EQ(shape.optimizer, s.optimizer);
      EXPECT_EQ(shape.param_count, s.params.size());
      EXPECT_EQ(shape.opt_state_count, s.opt_state.size());
    }
    // Epoch 0: 4 batches of 48 (8 samples dropped); epoch 1: 2 of 48, 3 of 30 (14 dropped);
    // epoch 2: 5 of 30.
    EXPECT_EQ(s.data_position, 2 * 200 + 150);
  }
  EXPECT_THROW(engine.checkpoint_shape(-1, hp, recipe_fixed("sgd")), std::invalid_argument);
}

TEST(EngineTest, AfterStepSeesEveryStepAndCanStop) {
  Engine engine(small_config("mlp"), 1);
  TrainState s = engine.initial_state();
  std::vector<int64_t> seen;
  engine.train(s, 10, recipe_hp(0.05), recipe_fixed("sgd"), [&](const StepDone& st) {
    seen.push_back(st.step());
    return st.step() < 4;
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.step, 4);
  EXPECT_EQ(s.data_position, 4 * 24);
}

TEST(EngineTest, InitializationDependsOnSeedOnly) {
  Engine a(small_config("cnn", 1), 1), b(small_config("cnn", 1), 2), c(small_config("cnn", 2), 1);
  EXPECT_TRUE(a.initial_state() == b.initial_state());
  EXPECT_FALSE(a.initial_state() == c.initial_state());
  EXPECT_EQ(a.config_hash(), b.config_hash());
  EXPECT_NE(a.config_hash(), c.config_hash());
  RunConfig moved = small_config("cnn", 1);
  moved.data_dir = "/usr/share/datasets/fashion-mnist/";
  EXPECT_EQ(Engine(moved, 1).config_hash(), a.config_hash());
  // PyTorch's default bound: 1/sqrt(fan_in), fan_in = 1*3*3 for the first convolution.
  const TrainState s = a.initial_state();
  EXPECT_EQ(a.param_count(), int64_t(s.params.size()));
  const std::vector<float> params = s.params.to_host(40);
  for (float p : params) EXPECT_LE(std::abs(p), 1.0f / 3.0f);
}

TEST(EngineTest, RefusesBadConfigs) {
  RunConfig c = small_config("mlp");
  c.model = {{"type", "rnn"}};
  EXPECT_THROW(Engine(c, 1), std::invalid_argument);
  c.model = {{"type", "mlp"}, {"hidden", {32, 0}}};
  EXPECT_THROW(Engine(c, 1), std::invalid_argument);
  c = small_config("mlp");
  c.train_samples = 60001;
  EXPECT_THROW(Engine(c, 1), std::invalid_argument);
  c = small_config("mlp");
  c.data = "cifar10";
  EXPECT_THROW(Engine(c, 1), std::invalid_argument);
  c = small_config("mlp");
  c.data_dir = "/nonexistent";
  EXPECT_THROW(Engine(c, 1), std::runtime_error);
  EXPECT_THROW(Engine(small_config("mlp"), 0), std::invalid_argument);
}

TEST(EngineTest, RefusesBadSettingsAndStates) {
  Engine engine(small_config("mlp"), 1);
  auto train = [&](TrainState s, const Hyperparams& hp, const nlohmann::json& fixed) {
    engine.train(s, 3, hp, fixed, {});
  };
  const TrainState init = engine.initial_state();
  const nlohmann::json sgd = recipe_fixed("sgd");
  EXPECT_THROW(train(init, {{"lr", Sequence::constant(0.1)}}, sgd), std::invalid_argument);
  EXPECT_THROW(train(init, recipe_hp(0.1), {{"dropout", 0.5}}), std::invalid_argument);
  EXPECT_THROW(train(init, recipe_hp(0.1), {{"precision", "bf16"}}), std::invalid_argument);
  EXPECT_THROW(train(init, recipe_hp(0.1), {{"optimizer", "lbfgs"}}), std::invalid_argument);
  EXPECT_THROW(
      train(init, {{"lr", Sequence::constant(0.1)}, {"batch_size", Sequence::constant(12.5)}}, sgd),
      std::invalid_argument);
  EXPECT_THROW(
      train(init, {{"lr", Sequence::constant(0.1)}, {"batch_size", Sequence::constant(201)}}, sgd),
      std::invalid_argument);
  EXPECT_THROW(train(init, recipe_hp(-0.1), sgd), std::invalid_argument);

  TrainState trained = init;
  engine.train(trained, 2, recipe_hp(0.05), sgd, {});
  EXPECT_THROW(train(trained, recipe_hp(0.05), recipe_fixed("adam")), std::invalid_argument);
  TrainState wrong = trained;
  const std::vector<float> fewer = trained.params.to_host(engine.param_count() - 1);
  wrong.params = kernels::Buffer<float>::from_host(engine.backend(), fewer.data(), fewer.size());
  EXPECT_THROW(train(wrong, recipe_hp(0.05), sgd), std::invalid_argument);
  EXPECT_THROW(engine.evaluate(wrong), std::invalid_argument);
  wrong = trained;
  wrong.opt_state = {};
  EXPECT_THROW(train(wrong, recipe_hp(0.05), sgd), std::invalid_argument);
}

TEST(StepSettingsTest, SequenceOverFixedOverDefault) {
  const Hyperparams hp = {{"lr", multistep(0.1, {10}, 0.5)},
                          {"optimizer", Sequence::text("adamw")}};
  const nlohmann::json fixed = {{"lr", 7.0}, {"batch_size", 64}, {"nesterov", true}};
  StepSettings s = settings_at(hp, fixed, 9);
  EXPECT_EQ(s.lr, 0.1);
  EXPECT_EQ(settings_at(hp, fixed, 10).lr, 0.05);
  EXPECT_EQ(s.batch_size, 64);
  EXPECT_EQ(s.optimizer, "adamw");
  EXPECT_TRUE(s.nesterov);
  EXPECT_EQ(s.momentum, 0.0);
  EXPECT_EQ(s.beta2, 0.999);
  EXPECT_EQ(s.precision, "fp32");
  EXPECT_NO_THROW(check_settings(hp, fixed));
  EXPECT_THROW(check_settings({{"momentum", Sequence::text("high")}}, fixed),
               std::invalid_argument);
  EXPECT_THROW(check_settings(hp, {{"batch_size", "64"}}), std::invalid_argument);
  EXPECT_THROW(check_settings(hp, nlohmann::json::array()), std::invalid_argument);
}

TEST(RngTest, PhiloxKnownAnswers) {
  // Random123's known-answer vectors for philox4x32-10 (counter and key all zeros / all ones).
  EXPECT_EQ(random_u64(0, RngPurpose{0}, 0, 0), 0x6627e8d5e169c58dull);
  EXPECT_EQ(random_u64(~0ull, RngPurpose{0xffffffff}, 0xffffffff, ~0ull), 0x408f276d41c83b0eull);
  const float u = random_uniform(3, RngPurpose::kInit, 0, 5);
  EXPECT_GE(u, 0.0f);
  EXPECT_LT(u, 1.0f);
  EXPECT_NE(random_u64(3, RngPurpose::kInit, 0, 5), random_u64(3, RngPurpose::kShuffle, 0, 5));
}

}  // namespace
}  // namespace hippo::worker
