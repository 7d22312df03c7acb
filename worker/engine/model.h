// The built-in models as lists of layers with explicit forward and backward passes over views into
// the engine's contiguous buffers (parameters, parameter gradients, activations, scratch).
//
//   mlp  {"type": "mlp", "hidden": [256, 128]}:  (Linear + ReLU) per hidden width, Linear -> 10.
//   cnn  {"type": "cnn", "channels": [32, 64], "fc": [128]}:  per channel width one block
//        conv3x3 (pad 1) + ReLU + maxpool 2 (activations in CNHW), then a flatten to [B, C*H*W],
//        (Linear + ReLU) per fc width, Linear -> 10.
// Parameters are initialized as PyTorch does by default (weights and biases uniform in
// +-1/sqrt(fan_in)), each value drawn from the counter-based generator at (seed, its index).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/kernels.h"

namespace hippo::worker {

// The SGD step a layer takes on its own parameters during backward, as soon as their gradient is
// known (ImageNetwork's fused step): the layer's parameters (those backward reads) and their
// momentum (null without momentum).
struct LayerSgd {
  float* params;
  float* momentum;
  kernels::SgdParams hp;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual int64_t param_count() const = 0;
  virtual int64_t in_size() const = 0;   // floats per sample
  virtual int64_t out_size() const = 0;  // floats per sample
  virtual float init_bound() const { return 0; }
  // Floats of scratch kept from forward to backward (and used by backward), for a batch on be.
  virtual int64_t scratch_size(const kernels::Backend& /*be*/, int /*batch*/) const { return 0; }

  // y[batch, out] from x[batch, in] (per-sample sizes; the layout within a sample is the layer's).
  virtual void forward(const kernels::Backend& be, int batch, const float* params, const float* x,
                       float* y, float* scratch) const = 0;
  // From x and y of the forward pass and dy (which it may overwrite): the parameter gradients
  // dparams (overwritten) and, unless dx is null, dx[batch, in]. With sgd, then the SGD step of
  // the parameters (sgd->params == params), with the bits of sgd_update over dparams; dparams is
  // then scratch (a fused step may leave it unspecified).
  virtual void backward(const kernels::Backend& be, int batch, const float* params, const float* x,
                        const float* y, float* dy, float* dx, float* dparams, float* scratch,
                        const LayerSgd* sgd) const = 0;
};

class Model {
 public:
  // Builds a model from its spec; throws std::invalid_argument naming the bad field.
  // The input is one image of in_channels x height x width per sample.
  Model(const nlohmann::json& spec, int in_channels, int height, int width, int classes);

  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  int64_t param_count() const { return param_offsets_.back(); }
  int64_t param_offset(size_t layer) const { return param_offsets_[layer]; }
  int64_t input_size() const { return layers_.front()->in_size(); }
  int classes() const { return classes_; }

  // Parameters at initialization for `seed`: params[param_count()].
  void init(uint64_t seed, float* params) const;

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> param_offsets_;  // per layer, and the total at the end
  int classes_;
};

}  // namespace hippo::worker
