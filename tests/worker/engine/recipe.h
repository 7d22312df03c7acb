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

}  // namespace hippo::worker::testing
