#include "worker/engine/model.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "worker/engine/rng.h"

namespace hippo::worker {
namespace {

using kernels::Backend;

// y[B, out] = x[B, in] W[out, in]^T + b[out], optionally followed by ReLU. params: W, then b.
class Linear final : public Layer {
 public:
  Linear(int in, int out, bool relu) : in_(in), out_(out), relu_(relu) {}
  int64_t param_count() const override { return int64_t{out_} * in_ + out_; }
  int64_t in_size() const override { return in_; }
  int64_t out_size() const override { return out_; }
  float init_bound() const override { return 1.0f / std::sqrt(static_cast<float>(in_)); }

  void forward(const Backend& be, int batch, const float* p, const float* x, float* y,
               float*) const override {
    be.linear_forward(x, p, p + int64_t{out_} * in_, y, batch, in_, out_, relu_);
  }

  // With sgd, W's step is taken tile by tile as its gradient is computed (linear_weight_sgd),
  // after dx has read W.
  void backward(const Backend& be, int batch, const float* p, const float* x, const float* y,
                float* dy, float* dx, float* dp, float*, const LayerSgd* sgd) const override {
    const int64_t weights = int64_t{out_} * in_;
    be.bias_relu_backward(relu_ ? y : nullptr, dy, dp + weights, batch, out_, 1);
    if (dx) be.gemm(false, false, batch, in_, out_, 1.0f, dy, p, 0.0f, dx);  // dx = dy W
    if (!sgd) {
      be.gemm(true, false, out_, in_, batch, 1.0f, dy, x, 0.0f, dp);  // dW[out, in] = dy^T x
      return;
    }
    be.linear_weight_sgd(dy, x, dp, sgd->params, sgd->momentum, batch, in_, out_, sgd->hp);
    be.sgd_update(sgd->params + weights, dp + weights,
                  sgd->momentum ? sgd->momentum + weights : nullptr, out_, sgd->hp);
  }

 private:
  int in_, out_;
  bool relu_;
};

// conv3x3 (pad 1) + ReLU + maxpool 2 on CNHW activations: x[Cin, B, H, W] -> y[Cout, B, H/2, W/2].
// params: W[Cout, Cin, 3, 3], then b[Cout]. Computed as y = relu(maxpool(conv(x)) + b), which is
// the same function (max commutes with adding a per-channel constant and with ReLU) with the bias
// and ReLU on a quarter of the values: the backend's conv_block_forward/backward (fused on the
// CPU), with their scratch kept from forward to backward.
class ConvBlock final : public Layer {
 public:
  ConvBlock(int in, int out, int h, int w) : in_(in), out_(out), h_(h), w_(w) {}
  int64_t param_count() const override { return int64_t{out_} * in_ * 9 + out_; }
  int64_t in_size() const override { return int64_t{in_} * h_ * w_; }
  int64_t out_size() const override { return int64_t{out_} * (h_ / 2) * (w_ / 2); }
  float init_bound() const override { return 1.0f / std::sqrt(static_cast<float>(in_ * 9)); }
  int64_t scratch_size(const Backend& be, int batch) const override {
    return be.conv_block_scratch_size(shape(batch));
  }

  void forward(const Backend& be, int batch, const float* p, const float* x, float* y,
               float* scratch) const override {
    const kernels::ConvShape s = shape(batch);
    be.conv_block_forward(s, x, p, p + s.col_rows() * out_, scratch, y);
  }

  void backward(const Backend& be, int batch, const float* p, const float* x, const float* y,
                float* dy, float* dx, float* dp, float* scratch,
                const LayerSgd* sgd) const override {
    const kernels::ConvShape s = shape(batch);
    be.conv_block_backward(s, x, p, y, dy, scratch, dx, dp, dp + s.col_rows() * out_);
    if (sgd) be.sgd_update(sgd->params, dp, sgd->momentum, param_count(), sgd->hp);
  }

 private:
  kernels::ConvShape shape(int batch) const {
    return {.batch = batch,
            .in_channels = in_,
            .out_channels = out_,
            .height = h_,
            .width = w_,
            .kernel = 3,
            .pad = 1};
  }
  int in_, out_, h_, w_;
};

// x[C, B, HW] (CNHW) -> y[B, C*HW], the layout Linear reads. No parameters.
class Flatten final : public Layer {
 public:
  Flatten(int c, int64_t hw) : c_(c), hw_(hw) {}
  int64_t param_count() const override { return 0; }
  int64_t in_size() const override { return c_ * hw_; }
  int64_t out_size() const override { return c_ * hw_; }

  void forward(const Backend& be, int batch, const float*, const float* x, float* y,
               float*) const override {
    be.swap_outer_axes(x, y, c_, batch, hw_);
  }
  void backward(const Backend& be, int batch, const float*, const float*, const float*, float* dy,
                float* dx, float*, float*, const LayerSgd*) const override {
    if (dx) be.swap_outer_axes(dy, dx, batch, c_, hw_);
  }

 private:
  int64_t c_, hw_;
};

// The positive integers of spec[field] (an array, possibly empty).
std::vector<int> widths(const nlohmann::json& spec, const char* field) {
  if (!spec.contains(field))
    throw std::invalid_argument(std::string("model.") + field + ": missing");
  const nlohmann::json& list = spec[field];
  if (!list.is_array())
    throw std::invalid_argument(std::string("model.") + field + ": expected an array of widths");
  std::vector<int> out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_number_integer() || list[i].get<int64_t>() < 1 ||
        list[i].get<int64_t>() > (1 << 16))
      throw std::invalid_argument(std::string("model.") + field + "[" + std::to_string(i) +
                                  "]: expected an integer in [1, 65536], got " + list[i].dump());
    out.push_back(list[i].get<int>());
  }
  return out;
}

}  // namespace

Model::Model(const nlohmann::json& spec, int in_channels, int height, int width, int classes)
    : classes_(classes) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    throw std::invalid_argument("model.type: missing (expected \"mlp\" or \"cnn\")");
  const std::string type = spec["type"];
  int64_t features = int64_t{in_channels} * height * width;
  if (type == "mlp") {
    for (int w : widths(spec, "hidden")) {
      layers_.push_back(std::make_unique<Linear>(static_cast<int>(features), w, true));
      features = w;
    }
  } else if (type == "cnn") {
    int c = in_channels, h = height, w = width;
    for (int out : widths(spec, "channels")) {
      if (h < 2 || w < 2)
        throw std::invalid_argument("model.channels: too many conv blocks for a " +
                                    std::to_string(height) + "x" + std::to_string(width) +
                                    " image (each halves the size)");
      layers_.push_back(std::make_unique<ConvBlock>(c, out, h, w));
      c = out;
      h /= 2;
      w /= 2;
    }
    layers_.push_back(std::make_unique<Flatten>(c, int64_t{h} * w));
    features = int64_t{c} * h * w;
    for (int out : widths(spec, "fc")) {
      layers_.push_back(std::make_unique<Linear>(static_cast<int>(features), out, true));
      features = out;
    }
  } else {
    throw std::invalid_argument("model.type: unknown model \"" + type + "\" (expected mlp or cnn)");
  }
  layers_.push_back(std::make_unique<Linear>(static_cast<int>(features), classes, false));
  param_offsets_.push_back(0);
  for (const auto& layer : layers_)
    param_offsets_.push_back(param_offsets_.back() + layer->param_count());
}

void Model::init(uint64_t seed, float* params) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const float bound = layers_[l]->init_bound();
    for (int64_t i = param_offsets_[l]; i < param_offsets_[l + 1]; ++i)
      params[i] = bound * (2.0f * random_uniform(seed, RngPurpose::kInit, 0, i) - 1.0f);
  }
}

}  // namespace hippo::worker
