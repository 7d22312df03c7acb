#include "worker/engine/pipelined_engine.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/interpreter.h"
#include "pipeline/queue_transport.h"

namespace hippo::worker {

std::vector<size_t> cut_blocks(const Gpt& model, int positions) {
  const size_t n = model.blocks().size();
  if (positions < 1 || static_cast<size_t>(positions) > n)
    throw std::invalid_argument("pipeline: " + std::to_string(positions) +
                                " pipeline positions (stages x chunks) for a model of " +
                                std::to_string(n) + " blocks (embedding, " + std::to_string(n - 2) +
                                " transformer blocks, head)");
  std::vector<double> prefix = {0};
  for (const auto& block : model.blocks()) prefix.push_back(prefix.back() + block->cost());
  // best[k][j]: the smallest largest cost of cutting blocks [0, j) into k ranges; from[k][j] the
  // start of the last of them. The first minimum wins ties, so the cut is a function of the model.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(positions + 1, std::vector<double>(n + 1, kNone));
  std::vector<std::vector<size_t>> from(positions + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= positions; ++k)
    for (size_t j = k; j <= n; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        const double worst = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (worst < best[k][j]) {
          best[k][j] = worst;
          from[k][j] = i;
        }
      }
  std::vector<size_t> cut(positions + 1);
  cut[positions] = n;
  for (int k = positions; k > 0; --k) cut[k - 1] = from[k][cut[k]];
  return cut;
}

// The executor of one pipeline stage: the model chunks (positions) of that stage, their
// activations per micro-batch in flight, the gradients between positions, and loans (BPipe).
class PipelinedGpt::Stage final : public pipeline::StageExecutor {
 public:
  Stage(const PipelinedGpt& owner, int stage, int threads)
      : owner_(owner), stage_(stage), be_(kernels::make_cpu_backend(threads)) {
    const int chunks = owner.program_.chunks;
    int64_t scratch = 0;
    for (int c = 0; c < chunks; ++c) {
      const auto [first, last] = blocks(c);
      scratch = std::max(scratch, GptActivations::scratch_size(owner.model_, first, last, 1));
    }
    scratch_per_sequence_ = scratch;
  }

  // Set before each run of the program.
  void begin_step(const float* params, const int32_t* inputs, const int32_t* targets, int sequences,
                  float grad_scale, float* grads, float* micro_grads) {
    params_ = params;
    inputs_ = inputs;
    targets_ = targets;
    sequences_ = sequences;
    grad_scale_ = grad_scale;
    grads_ = grads;
    micro_grads_ = micro_grads;
    next_backward_.assign(owner_.program_.chunks, 0);
    const int64_t scratch = scratch_per_sequence_ * sequences;
    if (scratch_.size() < scratch) scratch_ = kernels::Buffer<float>(be_, scratch);
  }
  // After the program: nothing may remain in flight.
  void end_step() {
    if (!acts_.empty() || !loans_.empty())
      throw std::logic_error("pipeline stage " + std::to_string(stage_) +
                             " ended a step with stashed activations");
    grad_.clear();
  }

  void forward(int mb, int chunk) override { activations(mb, chunk).forward(batch(mb), params_); }

  void backward(int mb, int chunk) override {
    if (mb != next_backward_[chunk]++)
      throw std::logic_error("pipeline stage " + std::to_string(stage_) + " chunk " +
                             std::to_string(chunk) + ": backward of micro-batch " +
                             std::to_string(mb) + " out of ascending order");
    const auto it = acts_.find({mb, chunk});
    if (it == acts_.end())
      throw std::logic_error("pipeline stage " + std::to_string(stage_) + ": backward of " +
                             std::to_string(mb) + " without its activations");
    // Micro-batch 0 writes the position's region of the gradient buffer, later ones add theirs
    // to it: the unpipelined path's sums, region by region.
    float* into = mb == 0 ? grads_ : micro_grads_;
    it->second->backward(batch(mb), params_, gradient(mb, chunk).data(), into, scratch_.data());
    if (mb > 0) {
      const auto [first, last] = blocks(chunk);
      const int64_t lo = owner_.model_.grad_offset(first), hi = owner_.model_.grad_offset(last);
      be_->add(grads_ + lo, micro_grads_ + lo, grads_ + lo, hi - lo);
    }
    acts_.erase(it);
  }

  void optimizer_step() override {}  // the update runs over the whole buffer after the program

  std::span<float> buffer(pipeline::Buffer which, int mb, int chunk) override {
    const GptShape& s = owner_.model_.shape();
    const size_t boundary = static_cast<size_t>(sequences_) * s.context * s.dim;
    switch (which) {
      case pipeline::Buffer::kActivationIn:
        return {activations(mb, chunk).input(), boundary};
      case pipeline::Buffer::kActivationOut:
        return {const_cast<float*>(activations(mb, chunk).output()), boundary};
      case pipeline::Buffer::kGradientIn:
      case pipeline::Buffer::kGradientOut: {
        kernels::Buffer<float>& g = gradient(mb, chunk);
        return {g.data(), static_cast<size_t>(g.size())};
      }
      case pipeline::Buffer::kStash:
        return activations(mb, chunk).storage();
      case pipeline::Buffer::kLoan: {
        // The partner's stash (BPipe pairs stage x with p - 1 - x), as large as the partner's.
        kernels::Buffer<float>& loan = loans_[{mb, chunk}];
        if (loan.empty()) {
          const int position = chunk * owner_.program_.stages + owner_.program_.stages - 1 - stage_;
          loan = kernels::Buffer<float>(
              be_, GptActivations::storage_size(owner_.model_, owner_.cut_[position],
                                                owner_.cut_[position + 1], sequences_));
        }
        return {loan.data(), static_cast<size_t>(loan.size())};
      }
    }
    throw std::logic_error("pipeline stage: unknown buffer");
  }

  void release(pipeline::Buffer which, int mb, int chunk) override {
    if (which == pipeline::Buffer::kStash) acts_.erase({mb, chunk});
    if (which == pipeline::Buffer::kLoan) loans_.erase({mb, chunk});
  }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  std::pair<size_t, size_t> blocks(int chunk) const {
    const int position = chunk * owner_.program_.stages + stage_;
    return {owner_.cut_[position], owner_.cut_[position + 1]};
  }

  TokenBatch batch(int mb) const {
    const int64_t offset = int64_t{mb} * sequences_ * owner_.model_.shape().context;
    return {sequences_, inputs_ + offset, targets_ + offset, grad_scale_};
  }

  GptActivations& activations(int mb, int chunk) {
    std::unique_ptr<GptActivations>& a = acts_[{mb, chunk}];
    if (!a) {
      const auto [first, last] = blocks(chunk);
      a = std::make_unique<GptActivations>(be_, owner_.model_, first, last, sequences_);
    }
    return *a;
  }

  // dL/d(output) of (mb, chunk), turned into dL/d(input) by the backward: [B, T, C].
  kernels::Buffer<float>& gradient(int mb, int chunk) {
    kernels::Buffer<float>& g = grad_[{mb, chunk}];
    if (g.empty()) {
      const GptShape& s = owner_.model_.shape();
      g = kernels::Buffer<float>(be_, int64_t{sequences_} * s.context * s.dim);
    }
    return g;
  }

  const PipelinedGpt& owner_;
  int stage_;
  std::shared_ptr<const kernels::Backend> be_;
  int64_t scratch_per_sequence_ = 0;
  kernels::Buffer<float> scratch_;
  std::map<Key, std::unique_ptr<GptActivations>> acts_;
  std::map<Key, kernels::Buffer<float>> grad_, loans_;
  std::vector<int> next_backward_;  // per chunk: the micro-batch whose backward comes next

  // The current step's buffers (host memory, shared by all stages: each writes only its
  // positions' regions of grads and micro_grads).
  const float* params_ = nullptr;
  const int32_t *inputs_ = nullptr, *targets_ = nullptr;
  int sequences_ = 0;
  float grad_scale_ = 0;
  float *grads_ = nullptr, *micro_grads_ = nullptr;
};

PipelinedGpt::PipelinedGpt(const Gpt& model, const pipeline::PipelineShape& shape,
                           int threads_per_stage)
    : model_(model) {
  if (const std::string problem = pipeline::check_shape(shape); !problem.empty())
    throw std::invalid_argument("pipeline." + problem);
  program_ = pipeline::generate(shape);
  cut_ = cut_blocks(model, shape.stages * shape.chunks);
  for (int s = 0; s < shape.stages; ++s)
    stages_.push_back(std::make_unique<Stage>(*this, s, threads_per_stage));
}

PipelinedGpt::~PipelinedGpt() = default;

void PipelinedGpt::gradients(const float* params, const int32_t* inputs, const int32_t* targets,
                             int sequences, float grad_scale, float* grads, float* micro_grads) {
  std::vector<pipeline::StageExecutor*> executors;
  for (auto& stage : stages_) {
    stage->begin_step(params, inputs, targets, sequences, grad_scale, grads, micro_grads);
    executors.push_back(stage.get());
  }
  pipeline::QueueTransport transport;
  pipeline::run_program(program_, executors, transport);
  for (auto& stage : stages_) stage->end_step();
}

}  // namespace hippo::worker
