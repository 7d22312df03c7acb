// The CPU training engine: trains the built-in models (model.h) on Fashion-MNIST (data.h) step by
// step, with every setting's value read from its sequence at each step, and evaluates them.
//
// Determinism (DESIGN.md invariant 1): a TrainState trained to step N is the same, bit for bit,
// however the steps [0, N) were split into train() calls, checkpoints, forks, processes and
// thread counts. Each step depends only on the state and the settings' values at that step;
// randomness comes from the counter-based generator (rng.h); every kernel computes each output
// from one thread in a fixed order (kernels.h).
//
//   Engine engine(config, threads);
//   TrainState s = engine.initial_state();
//   engine.train(s, 1000, hp, fixed, [&](const TrainState& st) { return true; });
//   Metrics m = engine.evaluate(s);
//   save_checkpoint(path, s, engine.config_hash());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "stagetree/sequence.h"
#include "worker/checkpoint.h"
#include "worker/data.h"
#include "worker/model.h"
#include "worker/train_state.h"

namespace hippo::worker {

// Everything a root key covers (besides the fixed settings, which train() takes).
struct RunConfig {
  nlohmann::json model;  // {"type":"mlp","hidden":[256,128]} or
                         // {"type":"cnn","channels":[32,64],"fc":[128]}
  std::string data = "fashion-mnist";
  int64_t train_samples = 60000, eval_samples = 10000;  // prefixes of the train / t10k sets
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // where, not what: not hashed
};

struct Metrics {
  double accuracy = 0;  // fraction of the evaluation prefix classified correctly
  double loss = 0;      // mean cross-entropy over the evaluation prefix
};

class Engine {
 public:
  // Loads the data (once per process) and builds the model; throws std::invalid_argument naming
  // the bad field of the config, std::runtime_error when the data cannot be read. `threads` is
  // the number of threads of this engine's kernels (and of OpenBLAS, which is process-wide).
  Engine(const RunConfig& config, int threads);

  // Step 0: parameters initialized from the seed, no optimizer state yet.
  TrainState initial_state() const;

  // Trains s from s.step up to step `to` (exclusive end). Each setting's value at each step comes
  // from hp (name -> sequence) if present, else from fixed (name -> JSON value), else the default
  // of stagetree/settings.h. after_step(s) runs after every step (may be empty); returning false
  // stops early. Throws std::invalid_argument for bad settings or a state of another model, and
  // when the optimizer differs from the one that made s.opt_state.
  void train(TrainState& s, int64_t to, const Hyperparams& hp, const nlohmann::json& fixed,
             const std::function<bool(const TrainState&)>& after_step);

  // Accuracy and mean loss on the evaluation prefix (in fixed batches, summed in a fixed order).
  Metrics evaluate(const TrainState& s);

  // Of the model spec, data name, sample counts and seed: a checkpoint of another config is
  // refused.
  uint64_t config_hash() const { return config_hash_; }
  int64_t param_count() const { return model_.param_count(); }
  const std::shared_ptr<const kernels::Backend>& backend() const { return backend_; }

 private:
  // Runs the forward pass of `batch` samples whose inputs are in input(); returns the logits.
  float* forward(const float* params, int batch);
  // Fills input() and labels_ with the given samples of `set`.
  void load_batch(const Dataset& set, const int32_t* indices, int batch);
  void check_state(const TrainState& s) const;
  // Whether b lies in memory this engine's backend can use.
  bool in_my_memory(const kernels::Buffer<float>& b) const;
  // Sizes the activation and scratch buffers for `batch` samples.
  void reserve(int batch);
  float* input() { return activations_.data(); }

  RunConfig config_;
  uint64_t config_hash_;
  std::shared_ptr<const kernels::Backend> backend_;
  std::shared_ptr<const Dataset> train_set_, eval_set_;
  Model model_;
  SampleOrder order_;

  // Buffers in the backend's memory, views into which the layers work on (shapes per batch of
  // `reserved_` samples):
  kernels::Buffer<float> grads_;        // [param_count], like the parameters
  kernels::Buffer<float> activations_;  // input [B, in], then each layer's output [B, out]
  kernels::Buffer<float> scratch_;      // each layer's scratch_size(B)
  kernels::Buffer<float> dact_[2];      // activation gradients, ping-pong, [B, max out]
  kernels::Buffer<int32_t> labels_;     // [B]
  kernels::Buffer<float> losses_;       // [B]
  std::vector<int64_t> act_offsets_, scratch_offsets_;
  int reserved_ = 0;
  // Host memory: the batch's sample indices, and its inputs and labels before they are copied in.
  std::vector<int32_t> indices_, host_labels_;
  std::vector<float> host_input_;
};

}  // namespace hippo::worker
