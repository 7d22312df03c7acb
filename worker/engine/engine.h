// The training engine: trains the built-in models (network.h: mlp and cnn on Fashion-MNIST, gpt on
// fortunes, pipelined or not) step by step, with every setting's value read from its sequence at
// each step, and evaluates them.
//
// Determinism: a TrainState trained to step N is the same, bit for bit,
// however the steps [0, N) were split into train() calls, checkpoints, forks, processes, thread
// counts, pipeline stages and their devices (of one kind). Each step depends only on the state and
// the settings' values at that step; randomness comes from the counter-based generator (rng.h);
// every kernel computes each output from one thread in a fixed order (kernels.h).
//
//   Engine engine(config, threads);
//   TrainState s = engine.initial_state();
//   engine.train(s, 1000, hp, fixed, [&](const StepDone& done) {
//     if (done.step() % 100 == 0) engine.evaluate(done.state());
//     return true;
//   });
//   Metrics m = engine.evaluate(s);
//   save_checkpoint(path, s, engine.config_hash());
//   s = load_checkpoint(path, engine.checkpoint_shape(s.step, hp, fixed), engine.backend());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "stagetree/sequence.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/data.h"
#include "worker/engine/train_state.h"

namespace hippo::worker {

// Everything a root key covers (besides the fixed settings, which train() takes).
struct RunConfig {
  nlohmann::json model;  // {"type":"mlp","hidden":[256,128]},
                         // {"type":"cnn","channels":[32,64],"fc":[128]} or
                         // {"type":"gpt","layers":2,"heads":4,"dim":128,"context":64,"vocab":96}
  std::string data = "fashion-mnist";  // or "fortunes" (gpt)
  // fortunes' tokenizer (text_data.h): empty for characters, or "bpe32k" (bpe.h); hashed when
  // given.
  std::string tokenizer;
  int64_t train_samples = 60000, eval_samples = 10000;  // prefixes of the train / eval sets
  uint64_t seed = 0;
  // Micro-batches per optimizer step (network.h); 1 is the plain step. Other values change the
  // sums, so they are hashed (1 is not, so that older hashes stay valid).
  int microbatches = 1;
  // Pipelined training of a gpt (pipelined_engine.h): stages (1: none), the schedule ("gpipe",
  // "1f1b", "interleaved", "bpipe") and model chunks per stage. They do not change the results,
  // so they are not hashed.
  int pipeline_stages = 1;
  std::string pipeline_schedule = "1f1b";
  int pipeline_chunks = 1;
  // The embedding and the output layer cut by vocabulary across the stages (1f1b or interleaved,
  // CPU stages): the same bits as without (the softmax in vocabulary blocks, gpt.h), not hashed.
  bool pipeline_vocab_parallel = false;
  // Where the stages compute (not hashed): a device group, "cpu:N" or "cuda:A-B"
  // (device_group.h), whose first device then holds the state; empty: the engine's device (all
  // stages on it: CPU threads, or streams of one GPU). Ignored by an unpipelined config.
  std::string pipeline_devices;
  // Where, not what (not hashed); empty: the data set's own place (/usr/share/datasets/
  // fashion-mnist, /usr/share/games/fortunes).
  std::string data_dir;
};

// A diverged model's (its loss NaN or infinite) accuracy is NaN too.
struct Metrics {
  double accuracy = 0;  // fraction of the evaluation prefix classified correctly (gpt: tokens)
  double loss = 0;      // mean cross-entropy over the evaluation prefix (gpt: nats per token)
};

class Network;  // network.h

// What train()'s after_step sees after each step: the step count, and the whole state on request.
// Between the steps of one train() call a pipelined gpt's stages hold the parameters and the
// optimizer state in buffers of their own (pipelined_engine.h) and the TrainState's two buffers
// are empty (no second copy, no copy per step): state() copies them into it (assembles) the first
// time it is called after a step, and train() empties them again when after_step returns. So a
// callback that reads only step() costs nothing, and one that evaluates, saves or forks the state
// reads it through state(), never through a TrainState of its own (whose buffers it would find
// empty, which evaluate() and checkpoints refuse). Unpipelined, state() is the TrainState itself.
class StepDone {
 public:
  int64_t step() const { return s_.step; }
  const TrainState& state() const;

 private:
  friend class Engine;
  StepDone(TrainState& s, Network* holder) : s_(s), holder_(holder) {}
  TrainState& s_;
  Network* holder_;  // the network holding s's parameters and optimizer state; null: s is whole
  mutable bool assembled_ = false;
};

class Engine {
 public:
  // Loads the data (once per process) and builds the model; throws std::invalid_argument naming
  // the bad field of the config, std::runtime_error when the data cannot be read. `threads` is
  // the number of threads of this engine's kernels.
  // `device` is "cpu" or "cuda:N" (kernels::make_backend: a device that is not there fails here);
  // a pipelined config with config.pipeline_devices runs on that group instead (its first
  // device holds the state).
  Engine(const RunConfig& config, int threads, const std::string& device = "cpu");
  ~Engine();

  // Step 0: parameters initialized from the seed, no optimizer state yet.
  TrainState initial_state() const;

  // Trains s from s.step up to step `to` (exclusive end). Each setting's value at each step comes
  // from hp (name -> sequence) if present, else from fixed (name -> JSON value), else the default
  // of stagetree/settings.h. after_step runs after every step (may be empty; StepDone above);
  // returning false stops early. Throws std::invalid_argument for bad settings or a state of
  // another model, and when the optimizer differs from the one that made s.opt_state. However it
  // returns (an exception from a step or from after_step too), s is whole again at its last step
  // done; only a failure inside a pipelined update (a device error) leaves s without parameters.
  void train(TrainState& s, int64_t to, const Hyperparams& hp, const nlohmann::json& fixed,
             const std::function<bool(const StepDone&)>& after_step);

  // Accuracy and mean loss on the evaluation prefix (in fixed batches, summed in a fixed order).
  Metrics evaluate(const TrainState& s);

  // Of the model spec, data name, sample counts and seed: a checkpoint of another config is
  // refused.
  uint64_t config_hash() const { return config_hash_; }
  // What the state of a run with these settings holds after `step` steps, as a checkpoint must
  // (load_checkpoint checks every field against it): the data position is replayed from the batch
  // size of every step before, the optimizer is step 0's. Throws std::invalid_argument for bad
  // settings, as train() would.
  CheckpointShape checkpoint_shape(int64_t step, const Hyperparams& hp,
                                   const nlohmann::json& fixed) const;
  int64_t param_count() const;
  // A pipelined gpt's per-stage peak of the bytes of the stages' own buffers, over the steps so
  // far (pipelined_engine.h); empty when not pipelined.
  std::vector<int64_t> stage_peak_bytes() const;
  const std::shared_ptr<const kernels::Backend>& backend() const { return backend_; }
  // The threads of its kernels from the next step on (between steps: from after_step, or
  // between calls): a worker lends a job the cores of its idle neighbours. The CPU's bits do not
  // depend on them (kernels/README.md); a pipelined run keeps its stages' threads, a GPU ignores
  // them.
  void set_threads(int threads);

 private:
  void check_state(const TrainState& s) const;
  // train()'s steps, after which train() has the network hand back the state it holds.
  void train_steps(TrainState& s, int64_t to, const Hyperparams& hp, const nlohmann::json& fixed,
                   const std::function<bool(const StepDone&)>& after_step);
  // Tells the network which samples the step at `step` (data position `position`) will read, so
  // that it can fetch them while this step trains; nothing when that step's settings are bad.
  void prefetch(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step, int64_t position);
  // Whether b lies in memory this engine's backend can use.
  bool in_my_memory(const kernels::Buffer<float>& b) const;

  RunConfig config_;
  uint64_t config_hash_;
  std::shared_ptr<const kernels::Backend> backend_;
  std::unique_ptr<Network> network_;  // the model and its data
  SampleOrder order_;
  // [network's grad_count], like the parameters; none for a network that takes whole steps.
  kernels::Buffer<float> grads_;
  std::vector<int32_t> indices_, next_indices_;  // host memory: this step's and the next's samples
};

}  // namespace hippo::worker
