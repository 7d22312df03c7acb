// Small training runs shared by the engine tests and engine_helper (which continues them in a
// fresh process): configs small enough for the sanitizer build, and settings that exercise
// schedules, a batch size that changes mid-epoch, and each optimizer.
#pragma once

#include <string>

#include "stagetree/sequence.h"
#include "worker/engine/engine.h"

namespace hippo::worker::testing {

inline RunConfig small_config(const std::string& model, uint64_t seed = 7) {
  RunConfig c;
  c.train_samples = 200;
  c.eval_samples = 100;
  c.seed = seed;
  if (model == "gpt") {  // on fortunes: samples are windows of 16 + 1 characters
    c.model = {{"type", "gpt"}, {"layers", 2},   {"heads", 2},
               {"dim", 16},     {"context", 16}, {"vocab", 96}};
    c.data = "fortunes";
    c.eval_samples = 20;
    return c;
  }
  c.model = model == "mlp" ? nlohmann::json{{"type", "mlp"}, {"hidden", {32, 16}}}
                           : nlohmann::json{{"type", "cnn"}, {"channels", {4, 8}}, {"fc", {16}}};
  return c;
}

// lr decays at step 6; the batch size grows from 24 to 40 at step 5, mid-epoch (200 samples).
inline Hyperparams recipe_hp(double lr) {
  return {{"lr", multistep(lr, {6}, 0.5)}, {"batch_size", piecewise({{0, 24}, {5, 40}})}};
}

inline nlohmann::json recipe_fixed(const std::string& optimizer) {
  if (optimizer == "sgd")
    return {{"optimizer", "sgd"}, {"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 1e-4}};
  return {{"optimizer", optimizer}, {"weight_decay", 1e-2}};
}

// The pipelined gpt's recipe: 8 blocks (embedding, 6 transformer blocks, head), enough for 4
// stages of 2 chunks, batch 16 in 4 micro-batches of 4 sequences, adamw with a learning rate that
// changes at step 2.
inline RunConfig pipeline_config(int stages, const std::string& schedule, int chunks,
                                 bool tied = true) {
  RunConfig c = small_config("gpt");
  c.model["layers"] = 6;
  c.model["tied"] = tied;
  c.eval_samples = 8;
  c.microbatches = 4;
  c.pipeline_stages = stages;
  c.pipeline_schedule = schedule;
  c.pipeline_chunks = chunks;
  return c;
}

struct PipelineRun {
  TrainState state;
  Metrics metrics;
  uint64_t hash;
};

// kPipelineSteps steps of the recipe on `device` (fp32 or bf16 products), and the metrics after.
constexpr int64_t kPipelineSteps = 3;
inline PipelineRun train_pipeline_recipe(const RunConfig& c, const std::string& device = "cpu",
                                         const std::string& precision = "fp32") {
  Engine engine(c, 1, device);
  TrainState s = engine.initial_state();
  engine.train(
      s, kPipelineSteps, {{"lr", multistep(3e-3, {2}, 0.5)}},
      {{"optimizer", "adamw"}, {"batch_size", 16}, {"weight_decay", 0.1}, {"precision", precision}},
      {});
  return {s, engine.evaluate(s), engine.config_hash()};
}

}  // namespace hippo::worker::testing
