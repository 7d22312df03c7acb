// The gpt model (gpt.h) on the fortunes corpus (text_data.h) as a Network, unpipelined or
// pipelined over CPU threads or GPUs (pipelined_engine.h).
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "worker/engine/gpt.h"
#include "worker/engine/network.h"
#include "worker/engine/pipelined_engine.h"
#include "worker/engine/text_data.h"

namespace hippo::worker {
namespace {

// Evaluation reads the evaluation windows in order, this many sequences at a time.
constexpr int kEvalSequences = 16;

std::shared_ptr<const TextCorpus> load_corpus(const RunConfig& c, const GptShape& shape) {
  if (c.data != "fortunes")
    throw std::invalid_argument("data: model gpt reads \"fortunes\", got \"" + c.data + "\"");
  auto corpus = load_fortunes(c.data_dir.empty() ? kFortunesDir : c.data_dir, c.tokenizer);
  if (shape.vocab < corpus->vocab)
    throw std::invalid_argument("model.vocab: " + std::to_string(shape.vocab) +
                                " is less than the fortunes vocabulary (" +
                                std::to_string(corpus->vocab) + " tokens)");
  auto check = [&](int64_t samples, int64_t tokens, const char* field) {
    const int64_t windows = text_samples(tokens, shape.context);
    if (samples < 1 || samples > windows)
      throw std::invalid_argument(std::string(field) + ": " + std::to_string(samples) +
                                  " is not in [1, " + std::to_string(windows) +
                                  "] (the windows of context " + std::to_string(shape.context) +
                                  " in the split)");
  };
  check(c.train_samples, std::ssize(corpus->train), "train_samples");
  check(c.eval_samples, std::ssize(corpus->eval), "eval_samples");
  return corpus;
}

class GptNetwork final : public Network {
 public:
  GptNetwork(const RunConfig& config, std::shared_ptr<const kernels::Backend> backend)
      : backend_(std::move(backend)),
        model_(GptShape::parse(config.model)),
        corpus_(load_corpus(config, model_.shape())),
        eval_samples_(config.eval_samples) {
    if (config.pipeline_stages > 1 || config.pipeline_chunks > 1) {
      const std::optional<pipeline::Schedule> schedule =
          pipeline::parse_schedule(config.pipeline_schedule);
      if (!schedule)
        throw std::invalid_argument("pipeline.schedule: unknown schedule \"" +
                                    config.pipeline_schedule +
                                    "\" (known: " + pipeline::kScheduleNames + ")");
      pipeline_shape_ = {config.pipeline_stages, config.microbatches, *schedule,
                         config.pipeline_chunks, config.pipeline_vocab_parallel};
      const DeviceGroup group = config.pipeline_devices.empty()
                                    ? DeviceGroup::of_device(backend_->name())
                                    : DeviceGroup::parse(config.pipeline_devices);
      pipelined_ =
          std::make_unique<PipelinedGpt>(model_, pipeline_shape_, backend_, group,
                                         std::max(1, backend_->threads() / config.pipeline_stages));
    }
  }

  void set_precision(kernels::Precision precision) override {
    if (pipelined_) pipelined_->set_precision(precision);
  }
  std::vector<int64_t> stage_peak_bytes() const override {
    return pipelined_ ? pipelined_->stage_peak_bytes() : std::vector<int64_t>{};
  }

  int64_t param_count() const override { return model_.param_count(); }
  int64_t grad_count() const override { return model_.grad_count(); }
  void init(uint64_t seed, float* params) const override { model_.init(seed, params); }

  void gradients(const float* params, const int32_t* indices, int batch, int microbatches,
                 float* grads) override {
    if (pipelined_) throw std::logic_error("a pipelined gpt takes whole steps (train_step)");
    const int T = model_.shape().context, micro = batch / microbatches;
    load_tokens(corpus_->train, indices, batch);
    if (microbatches > 1 && micro_grads_.size() < grad_count())
      micro_grads_ = kernels::Buffer<float>(backend_, grad_count());
    GptActivations& acts = activations(micro);
    for (int m = 0; m < microbatches; ++m) {
      const int64_t offset = int64_t{m} * micro * T;
      const TokenBatch tb{micro, inputs_.data() + offset, targets_.data() + offset,
                          grad_scale(batch)};
      float* into = m == 0 ? grads : micro_grads_.data();
      acts.forward(tb, params);
      acts.backward(tb, params, grad_.data(), into, scratch_.data());
      if (m > 0) backend_->add(grads, into, grads, grad_count());
    }
    model_.reduce_tied(*backend_, grads);
  }

  // Pipelined, the stages hold the state and update it (pipelined_engine.h).
  bool train_step(TrainState& s, bool load, const int32_t* indices, int batch, int microbatches,
                  const OptimizerUpdate& update) override {
    if (!pipelined_) return false;
    if (microbatches != pipeline_shape_.microbatches)
      throw std::logic_error("pipelined gpt built for " +
                             std::to_string(pipeline_shape_.microbatches) + " micro-batches");
    load_tokens(corpus_->train, indices, batch);
    pipelined_->step(s, load, inputs_.data(), targets_.data(), batch / microbatches,
                     grad_scale(batch), update);
    return true;
  }
  bool holds_state() const override { return pipelined_ && pipelined_->holds_state(); }
  void assemble(TrainState& s) override {
    if (pipelined_) pipelined_->assemble(s);
  }
  void release() override {
    if (pipelined_) pipelined_->release();
  }

  Metrics evaluate(const float* params) override {
    const int T = model_.shape().context, V = model_.shape().vocab;
    double loss = 0;
    int64_t correct = 0;
    std::vector<int32_t> indices(kEvalSequences);
    for (int64_t start = 0; start < eval_samples_; start += kEvalSequences) {
      const int batch = static_cast<int>(std::min<int64_t>(kEvalSequences, eval_samples_ - start));
      for (int b = 0; b < batch; ++b) indices[b] = static_cast<int32_t>(start + b);
      load_tokens(corpus_->eval, indices.data(), batch);
      GptActivations& acts = activations(batch);
      acts.forward({batch, inputs_.data(), targets_.data(), 0.0f}, params);
      loss += backend_->sum(acts.output(), int64_t{batch} * T);
      correct += backend_->count_correct(acts.logits(), targets_.data(), batch * T, V);
    }
    const double tokens = static_cast<double>(eval_samples_) * T;
    return {static_cast<double>(correct) / tokens, loss / tokens};
  }

 private:
  // d(mean loss over a step's tokens) / d(one token's loss)
  float grad_scale(int batch) const {
    return 1.0f / static_cast<float>(int64_t{batch} * model_.shape().context);
  }

  // Copies the windows samples[batch] of `split` into inputs_ and targets_ [batch, T].
  void load_tokens(const std::vector<int32_t>& split, const int32_t* samples, int batch) {
    const int T = model_.shape().context;
    const int64_t n = int64_t{batch} * T;
    host_inputs_.resize(n);
    host_targets_.resize(n);
    fill_windows(split, T, samples, batch, host_inputs_.data(), host_targets_.data());
    if (inputs_.size() < n) {
      inputs_ = kernels::Buffer<int32_t>(backend_, n);
      targets_ = kernels::Buffer<int32_t>(backend_, n);
    }
    backend_->copy_from_host(inputs_.data(), host_inputs_.data(), n * int64_t{sizeof(int32_t)});
    backend_->copy_from_host(targets_.data(), host_targets_.data(), n * int64_t{sizeof(int32_t)});
  }

  // The activations of B sequences through the whole model, and the backward's buffers.
  GptActivations& activations(int B) {
    if (!acts_ || acts_->sequences() != B) {
      const size_t blocks = model_.blocks().size();
      acts_.reset();  // free the old before the new
      acts_ = std::make_unique<GptActivations>(backend_, model_, 0, blocks, B);
      const GptShape& s = model_.shape();
      grad_ = kernels::Buffer<float>(backend_, int64_t{B} * s.context * s.dim);
      scratch_ =
          kernels::Buffer<float>(backend_, GptActivations::scratch_size(model_, 0, blocks, B));
    }
    return *acts_;
  }

  std::shared_ptr<const kernels::Backend> backend_;
  Gpt model_;
  std::shared_ptr<const TextCorpus> corpus_;
  int64_t eval_samples_;
  pipeline::PipelineShape pipeline_shape_;
  std::unique_ptr<PipelinedGpt> pipelined_;  // null: unpipelined

  // Backend memory: the tokens of a step (or an evaluation batch), the activations, the residual
  // stream's gradient [B, T, C], backward scratch, and micro-batch 1, 2, ...'s gradient.
  kernels::Buffer<int32_t> inputs_, targets_;
  std::unique_ptr<GptActivations> acts_;
  kernels::Buffer<float> grad_, scratch_, micro_grads_;
  std::vector<int32_t> host_inputs_, host_targets_;
};

}  // namespace

std::unique_ptr<Network> make_gpt_network(const RunConfig& config,
                                          std::shared_ptr<const kernels::Backend> backend) {
  return std::make_unique<GptNetwork>(config, std::move(backend));
}

}  // namespace hippo::worker
