// What the engine trains: a model together with its data set. The engine owns the step loop (the
// settings at each step, the data position, the optimizer, the state); a Network turns one step's
// training samples into the gradient of their mean loss, and evaluates parameters.
//
//   mlp, cnn on fashion-mnist   image_network.cc (model.h's layers)
//   gpt on fortunes             gpt_network.cc (gpt.h's blocks; pipelined over CPU threads or
//                               GPUs when the config asks for pipeline stages:
//                               pipelined_engine.h)
//
// Micro-batches: a step of B samples in M micro-batches of B / M computes each micro-batch's
// gradient of (its summed loss / B) and adds them in ascending micro-batch order. M = 1 is the
// plain step; another M gives other bits (other sums), so it is part of the run config's hash.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "worker/engine/engine.h"

namespace hippo::worker {

class Network {
 public:
  virtual ~Network() = default;
  virtual int64_t param_count() const = 0;
  // The gradient buffer's size: param_count(), or more where the network keeps partial sums there
  // (gpt's share of a tied weight); gradients() leaves the true gradient in its first
  // param_count() values.
  virtual int64_t grad_count() const { return param_count(); }
  // params[param_count()] (host memory) at initialization for `seed`.
  virtual void init(uint64_t seed, float* params) const = 0;
  // grads (overwritten, backend memory) = the gradient of the mean loss over the training samples
  // indices[batch], in `microbatches` micro-batches (which divide batch: the engine checks it).
  virtual void gradients(const float* params, const int32_t* indices, int batch, int microbatches,
                         float* grads) = 0;
  // The gradient of one micro-batch (as gradients() with microbatches 1) and the SGD step of
  // params[param_count()] with it and with momentum[param_count()] (null without momentum), with
  // the bits of gradients() then the backend's sgd_update; grads is scratch. A network may take
  // each layer's step as soon as its gradient is known, while it is in cache (the mlp's 1-thread
  // step: 5% faster). Returns false, changing nothing, where the network does not fuse them
  // (the caller then makes both calls).
  virtual bool sgd_step(float* /*params*/, const int32_t* /*indices*/, int /*batch*/,
                        float* /*grads*/, float* /*momentum*/, const kernels::SgdParams& /*hp*/) {
    return false;
  }
  // A network that keeps the training state in buffers of its own (a pipeline's stages, each
  // its share) takes the whole step: the gradient of the samples indices[batch] and the update
  // of the parameters and optimizer state it holds, as gradients() and the backend's update
  // would (the same bits). `load` (the first step of a train() call): it first takes s.params
  // and s.opt_state into its buffers and empties them; from then on it holds the state, and s's
  // buffers stay empty until assemble(). Returns false, changing nothing, where the network
  // does not.
  virtual bool train_step(TrainState& /*s*/, bool /*load*/, const int32_t* /*indices*/,
                          int /*batch*/, int /*microbatches*/, const OptimizerUpdate& /*update*/) {
    return false;
  }
  // Whether it holds a state taken from a TrainState (from a load to the next release()).
  virtual bool holds_state() const { return false; }
  // Such a network's state into s.params and s.opt_state (allocated anew, in the engine
  // backend's memory), as the unpipelined steps would have left them; it still holds it. Throws
  // std::runtime_error where a failed step left it no consistent state.
  virtual void assemble(TrainState& /*s*/) {}
  // It frees the buffers of the state it holds, holding none until the next load (the end of a
  // train() call: the state is s's again).
  virtual void release() {}
  // Metrics on the evaluation prefix, read in order in fixed batches and summed in a fixed order.
  virtual Metrics evaluate(const float* params) = 0;
  // A hint: the training samples indices[batch] come next, so a network may start fetching them
  // into the cache (they are scattered over the data set). Changes no result.
  virtual void prefetch(const int32_t* /*indices*/, int /*batch*/) const {}
  // The precision of the next gradients() for backends of the network's own besides the
  // engine's (a pipeline's stages), which the engine sets itself.
  virtual void set_precision(kernels::Precision) {}
  // A pipelined network's per-stage peak of its stages' own buffers (PipelinedGpt::
  // stage_peak_bytes); empty for the others.
  virtual std::vector<int64_t> stage_peak_bytes() const { return {}; }
};

// The network of config.model and config.data (loads the data once per process); throws
// std::invalid_argument naming the bad field, std::runtime_error when the data cannot be read.
std::unique_ptr<Network> make_network(const RunConfig& config,
                                      std::shared_ptr<const kernels::Backend> backend);
// The two kinds that make_network picks from by model type.
std::unique_ptr<Network> make_image_network(const RunConfig& config,
                                            std::shared_ptr<const kernels::Backend> backend);
std::unique_ptr<Network> make_gpt_network(const RunConfig& config,
                                          std::shared_ptr<const kernels::Backend> backend);

}  // namespace hippo::worker
