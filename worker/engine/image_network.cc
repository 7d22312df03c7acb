// The mlp and cnn models (model.h) on Fashion-MNIST (data.h) as a Network.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/engine/data.h"
#include "worker/engine/model.h"
#include "worker/engine/network.h"

namespace hippo::worker {
namespace {

// Evaluation reads the evaluation prefix in batches of this many samples, in order.
constexpr int kEvalBatch = 128;
constexpr int kClasses = 10;
// A batch's loading fetches this many samples ahead of the one it converts.
constexpr int kLoadAhead = 4;
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The training or evaluation set, checked against the requested prefix length.
std::shared_ptr<const Dataset> load_set(const RunConfig& c, const std::string& split,
                                        int64_t samples, const char* field) {
  if (c.data != "fashion-mnist")
    throw std::invalid_argument("data: model " + c.model.value("type", std::string("?")) +
                                " reads fashion-mnist, got \"" + c.data + "\"");
  std::shared_ptr<const Dataset> set =
      load_fashion_mnist(c.data_dir.empty() ? kFashionMnistDir : c.data_dir, split);
  if (samples < 1 || samples > set->count)
    throw std::invalid_argument(std::string(field) + ": " + std::to_string(samples) +
                                " is not in [1, " + std::to_string(set->count) + "]");
  return set;
}

class ImageNetwork final : public Network {
 public:
  ImageNetwork(const RunConfig& config, std::shared_ptr<const kernels::Backend> backend)
      : backend_(std::move(backend)),
        train_set_(load_set(config, "train", config.train_samples, "train_samples")),
        eval_set_(load_set(config, "t10k", config.eval_samples, "eval_samples")),
        eval_samples_(config.eval_samples),
        model_(config.model, 1, train_set_->rows, train_set_->cols, kClasses) {
    if (config.pipeline_stages > 1 || config.pipeline_chunks > 1)
      throw std::invalid_argument(
          "pipeline.stages: only a gpt model can be cut into pipeline "
          "stages, model.type is " +
          config.model.value("type", std::string("?")));
  }

  int64_t param_count() const override { return model_.param_count(); }
  void init(uint64_t seed, float* params) const override { model_.init(seed, params); }

  void gradients(const float* params, const int32_t* indices, int batch, int microbatches,
                 float* grads) override {
    backpropagate(params, indices, batch, microbatches, grads, nullptr, nullptr, nullptr);
  }

  bool sgd_step(float* params, const int32_t* indices, int batch, float* grads, float* momentum,
                const kernels::SgdParams& hp) override {
    backpropagate(params, indices, batch, 1, grads, params, momentum, &hp);
    return true;
  }

  void prefetch(const int32_t* indices, int batch) const override {
    for (int b = 0; b < batch; ++b) prefetch_sample<2>(*train_set_, indices[b]);
  }

  Metrics evaluate(const float* params) override {
    reserve(kEvalBatch);
    double loss = 0;
    int64_t correct = 0;
    for (int64_t start = 0; start < eval_samples_; start += kEvalBatch) {
      const int batch = static_cast<int>(std::min<int64_t>(kEvalBatch, eval_samples_ - start));
      for (int b = 0; b < batch; ++b) indices_[b] = static_cast<int32_t>(start + b);
      load_batch(*eval_set_, indices_.data(), batch);
      const float* logits = forward(params, batch);
      backend_->softmax_cross_entropy(logits, labels_.data(), batch, kClasses, losses_.data(),
                                      nullptr, 0);
      loss += backend_->sum(losses_.data(), batch);
      correct += backend_->count_correct(logits, labels_.data(), batch, kClasses);
    }
    const double n = static_cast<double>(eval_samples_);
    return {static_cast<double>(correct) / n, loss / n};
  }

 private:
  // gradients(); with sgd (and microbatches 1), also each layer's SGD step as soon as its
  // gradient is known (Layer::backward), of stepped (params itself, writable) and momentum:
  // sgd_step().
  void backpropagate(const float* params, const int32_t* indices, int batch, int microbatches,
                     float* grads, float* stepped, float* momentum, const kernels::SgdParams* sgd) {
    const kernels::Backend& be = *backend_;
    const auto& layers = model_.layers();
    const int micro = batch / microbatches;
    reserve(micro);
    if (microbatches > 1 && micro_grads_.size() < param_count())
      micro_grads_ = kernels::Buffer<float>(backend_, param_count());
    for (int m = 0; m < microbatches; ++m) {
      load_batch(*train_set_, indices + int64_t{m} * micro, micro);
      const float* logits = forward(params, micro);
      float* dy = dact_[0].data();  // [micro, classes]: d(mean loss over the batch)/d(logits)
      be.softmax_cross_entropy(logits, labels_.data(), micro, kClasses, losses_.data(), dy,
                               1.0f / static_cast<float>(batch));
      float* into = m == 0 ? grads : micro_grads_.data();
      for (size_t l = layers.size(); l-- > 0;) {
        float* dx = l > 0 ? dact_[(layers.size() - l) % 2].data() : nullptr;
        const int64_t at = model_.param_offset(l);
        LayerSgd step{};
        if (sgd) step = {stepped + at, momentum ? momentum + at : nullptr, *sgd};
        layers[l]->backward(be, micro, params + at, activations_.data() + act_offsets_[l],
                            activations_.data() + act_offsets_[l + 1], dy, dx, into + at,
                            scratch_.data() + scratch_offsets_[l], sgd ? &step : nullptr);
        dy = dx;
      }
      if (m > 0) be.add(grads, into, grads, param_count());
    }
  }

  // Starts fetching sample `index` of `set` (its pixels and label) into the cache; `locality` is
  // __builtin_prefetch's (3: into L1, 2: L2).
  template <int kLocality>
  static void prefetch_sample(const Dataset& set, int32_t index) {
    const uint8_t* pixels = set.pixels.data() + index * set.image_size();
    for (int64_t i = 0; i < set.image_size(); i += 64) __builtin_prefetch(pixels + i, 0, kLocality);
    __builtin_prefetch(set.labels.data() + index, 0, kLocality);
  }

  // Sizes the activation and scratch buffers for `batch` samples.
  void reserve(int batch) {
    if (batch <= reserved_) return;
    reserved_ = batch;
    const auto& layers = model_.layers();
    // act_offsets_[l] is where layer l's input starts, act_offsets_[l + 1] its output.
    act_offsets_ = {0, int64_t{batch} * model_.input_size()};
    scratch_offsets_ = {0};
    int64_t widest = model_.input_size();
    for (const auto& layer : layers) {
      act_offsets_.push_back(act_offsets_.back() + int64_t{batch} * layer->out_size());
      scratch_offsets_.push_back(scratch_offsets_.back() + layer->scratch_size(*backend_, batch));
      widest = std::max(widest, layer->out_size());
    }
    activations_ = kernels::Buffer<float>(backend_, act_offsets_.back());
    scratch_ = kernels::Buffer<float>(backend_, scratch_offsets_.back());
    for (auto& d : dact_) d = kernels::Buffer<float>(backend_, int64_t{batch} * widest);
    labels_ = kernels::Buffer<int32_t>(backend_, batch);
    losses_ = kernels::Buffer<float>(backend_, batch);
    host_input_.resize(static_cast<size_t>(batch * model_.input_size()));
    host_labels_.resize(batch);
    indices_.resize(batch);
  }

  // Fills the input activations and labels_ with the given samples of `set`: in place where the
  // backend's memory is the host's, else through host memory.
  void load_batch(const Dataset& set, const int32_t* indices, int batch) {
    // Pixels scaled to [0, 1], then standardized with the training set's mean and deviation (as
    // torchvision's usual Normalize((0.2860,), (0.3530,)) for Fashion-MNIST).
    constexpr float kMean = 0.2860f, kInvStd = 1.0f / 0.3530f;
    const int64_t size = set.image_size();
    float* in_place = static_cast<float*>(backend_->host_address(activations_.data()));
    float* x = in_place ? in_place : host_input_.data();  // [batch, rows * cols]
    for (int b = 0; b < batch; ++b) {
      // The images are scattered over the data set: fetching a few ahead overlaps their cache
      // misses (one image at a time waited for each: 7% of the mlp's step).
      if (b + kLoadAhead < batch) prefetch_sample<3>(set, indices[b + kLoadAhead]);
      const uint8_t* pixels = set.pixels.data() + indices[b] * size;
      for (int64_t i = 0; i < size; ++i)
        x[b * size + i] = (pixels[i] * (1.0f / 255.0f) - kMean) * kInvStd;
      host_labels_[b] = set.labels[indices[b]];
    }
    if (!in_place)
      backend_->copy_from_host(activations_.data(), x, batch * size * int64_t{sizeof(float)});
    backend_->copy_from_host(labels_.data(), host_labels_.data(), batch * int64_t{sizeof(int32_t)});
  }

  // Runs the forward pass of `batch` samples whose inputs are loaded; returns the logits.
  float* forward(const float* params, int batch) {
    const auto& layers = model_.layers();
    for (size_t l = 0; l < layers.size(); ++l)
      layers[l]->forward(
          *backend_, batch, params + model_.param_offset(l), activations_.data() + act_offsets_[l],
          activations_.data() + act_offsets_[l + 1], scratch_.data() + scratch_offsets_[l]);
    return activations_.data() + act_offsets_[layers.size()];
  }

  std::shared_ptr<const kernels::Backend> backend_;
  std::shared_ptr<const Dataset> train_set_, eval_set_;
  int64_t eval_samples_;
  Model model_;

  // Buffers in the backend's memory, views into which the layers work on (shapes per batch of
  // `reserved_` samples):
  kernels::Buffer<float> activations_;  // input [B, in], then each layer's output [B, out]
  kernels::Buffer<float> scratch_;      // each layer's scratch_size(B)
  kernels::Buffer<float> dact_[2];      // activation gradients, ping-pong, [B, max out]
  kernels::Buffer<int32_t> labels_;     // [B]
  kernels::Buffer<float> losses_;       // [B]
  kernels::Buffer<float> micro_grads_;  // [param_count]: micro-batch 1, 2, ...'s gradient
  std::vector<int64_t> act_offsets_, scratch_offsets_;
  int reserved_ = 0;
  // Host memory: the batch's sample indices, and its inputs and labels before they are copied in.
  std::vector<int32_t> indices_, host_labels_;
  std::vector<float> host_input_;
};

}  // namespace

std::unique_ptr<Network> make_image_network(const RunConfig& config,
                                            std::shared_ptr<const kernels::Backend> backend) {
  return std::make_unique<ImageNetwork>(config, std::move(backend));
}

}  // namespace hippo::worker
