#include "worker/engine/pipelined_engine.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/interpreter.h"
#include "pipeline/queue_transport.h"
#ifdef HIPPO_HAVE_CUDA_TRANSPORT
#include "pipeline/cuda_transport.h"
#endif

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
  Stage(const PipelinedGpt& owner, int stage, std::shared_ptr<const kernels::Backend> be)
      : owner_(owner),
        stage_(stage),
        be_(std::move(be)),
        mirrored_(std::string(be_->name()) != owner.home_->name()),
        spare_acts_(owner.program_.chunks),
        spare_loans_(owner.program_.chunks) {
    const int chunks = owner.program_.chunks;
    int64_t scratch = 0;
    for (int c = 0; c < chunks; ++c) {
      const auto [first, last] = blocks(c);
      scratch = std::max(scratch, GptActivations::scratch_size(owner.model_, first, last, 1));
    }
    scratch_per_sequence_ = scratch;
  }

  const kernels::Backend& backend() const { return *be_; }

  // Before each run of the program (on the engine's thread): this stage's buffers, and its work
  // ordered after the home's.
  void begin_step(const float* params, const int32_t* inputs, const int32_t* targets, int sequences,
                  float grad_scale, float* grads, float* micro_grads) {
    const Gpt& model = owner_.model_;
    if (sequences != sequences_) {  // another batch size: the kept buffers do not fit
      for (auto& spare : spare_acts_) spare.clear();
      for (auto& spare : spare_loans_) spare.clear();
      spare_grads_.clear();
    }
    acts_.clear();  // a failed step may have left some
    loans_.clear();
    grad_.clear();
    sequences_ = sequences;
    grad_scale_ = grad_scale;
    next_backward_.assign(owner_.program_.chunks, 0);
    const int64_t scratch = scratch_per_sequence_ * sequences;
    if (scratch_.size() < scratch) scratch_ = kernels::Buffer<float>(be_, scratch);
    be_->wait_for(*owner_.home_);  // the tokens' upload, the last update
    if (!mirrored_) {
      params_ = params, inputs_ = inputs, targets_ = targets;
      grads_ = grads, micro_grads_ = micro_grads;
      return;
    }
    // Another GPU: the parameters of this stage's blocks (and the embedding, which a tied head
    // reads) and the step's tokens, copied into the mirrors.
    const int64_t tokens =
        int64_t{owner_.program_.microbatches} * sequences * model.shape().context;
    if (params_mirror_.size() != model.param_count()) {
      params_mirror_ = kernels::Buffer<float>(be_, model.param_count());
      grads_mirror_ = kernels::Buffer<float>(be_, model.grad_count());
      if (owner_.program_.microbatches > 1)
        micro_mirror_ = kernels::Buffer<float>(be_, model.grad_count());
    }
    if (inputs_mirror_.size() < tokens) {
      inputs_mirror_ = kernels::Buffer<int32_t>(be_, tokens);
      targets_mirror_ = kernels::Buffer<int32_t>(be_, tokens);
    }
    auto pull = [&](size_t first, size_t last) {
      const int64_t lo = model.param_offset(first), hi = model.param_offset(last);
      be_->copy_from(*owner_.home_, params_mirror_.data() + lo, params + lo,
                     (hi - lo) * int64_t{sizeof(float)});
    };
    for (int c = 0; c < owner_.program_.chunks; ++c) {
      const auto [first, last] = blocks(c);
      pull(first, last);
      if (last == model.blocks().size() && model.shape().tied) pull(0, 1);
    }
    const int64_t token_bytes = tokens * int64_t{sizeof(int32_t)};
    be_->copy_from(*owner_.home_, inputs_mirror_.data(), inputs, token_bytes);
    be_->copy_from(*owner_.home_, targets_mirror_.data(), targets, token_bytes);
    params_ = params_mirror_.data(), inputs_ = inputs_mirror_.data();
    targets_ = targets_mirror_.data(), grads_ = grads_mirror_.data();
    micro_grads_ = micro_mirror_.data();
  }

  // After the program (on the engine's thread): nothing may remain in flight; the home's later
  // work (the update) ordered after this stage's, with its gradient regions copied back from a
  // mirror.
  void end_step(float* grads) {
    if (!acts_.empty() || !loans_.empty())
      throw std::logic_error("pipeline stage " + std::to_string(stage_) +
                             " ended a step with stashed activations");
    for (auto& [key, g] : grad_) spare_grads_.push_back(std::move(g));
    grad_.clear();
    if (!mirrored_) {
      owner_.home_->wait_for(*be_);
      return;
    }
    for (int c = 0; c < owner_.program_.chunks; ++c) {
      const auto [first, last] = blocks(c);
      const int64_t lo = owner_.model_.grad_offset(first), hi = owner_.model_.grad_offset(last);
      owner_.home_->copy_from(*be_, grads + lo, grads_mirror_.data() + lo,
                              (hi - lo) * int64_t{sizeof(float)});
    }
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
    keep(acts_, it, spare_acts_[chunk]);
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
        kernels::Buffer<float>& loan = this->loan(mb, chunk);
        return {loan.data(), static_cast<size_t>(loan.size())};
      }
      case pipeline::Buffer::kEmbedding:
      case pipeline::Buffer::kEmbeddingIn:
      case pipeline::Buffer::kEmbedGradient:
      case pipeline::Buffer::kVocabInput:
      case pipeline::Buffer::kVocabStats:
      case pipeline::Buffer::kVocabStatsIn:
      case pipeline::Buffer::kVocabGradient:
      case pipeline::Buffer::kVocabGradientIn:
        break;  // the programs of this engine have no vocabulary passes
    }
    throw std::logic_error("pipeline stage: unknown buffer");
  }

  void release(pipeline::Buffer which, int mb, int chunk) override {
    if (which == pipeline::Buffer::kStash) {
      if (const auto it = acts_.find({mb, chunk}); it != acts_.end())
        keep(acts_, it, spare_acts_[chunk]);
    }
    if (which == pipeline::Buffer::kLoan) {
      if (const auto it = loans_.find({mb, chunk}); it != loans_.end())
        keep(loans_, it, spare_loans_[chunk]);
    }
  }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  // Moves a buffer that is done with into the spares of its kind, for a later micro-batch.
  template <typename Map, typename Spares>
  static void keep(Map& map, typename Map::iterator it, Spares& spares) {
    spares.push_back(std::move(it->second));
    map.erase(it);
  }

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
      if (auto& spare = spare_acts_[chunk]; !spare.empty()) {
        a = std::move(spare.back());
        spare.pop_back();
      } else {
        const auto [first, last] = blocks(chunk);
        a = std::make_unique<GptActivations>(be_, owner_.model_, first, last, sequences_);
      }
    }
    return *a;
  }

  // dL/d(output) of (mb, chunk), turned into dL/d(input) by the backward: [B, T, C].
  kernels::Buffer<float>& gradient(int mb, int chunk) {
    kernels::Buffer<float>& g = grad_[{mb, chunk}];
    if (g.empty()) {
      if (!spare_grads_.empty()) {
        g = std::move(spare_grads_.back());
        spare_grads_.pop_back();
      } else {
        const GptShape& s = owner_.model_.shape();
        g = kernels::Buffer<float>(be_, int64_t{sequences_} * s.context * s.dim);
      }
    }
    return g;
  }

  // The partner's stash (BPipe pairs stage x with p - 1 - x), as large as the partner's.
  kernels::Buffer<float>& loan(int mb, int chunk) {
    kernels::Buffer<float>& loan = loans_[{mb, chunk}];
    if (loan.empty()) {
      if (auto& spare = spare_loans_[chunk]; !spare.empty()) {
        loan = std::move(spare.back());
        spare.pop_back();
      } else {
        const int position = chunk * owner_.program_.stages + owner_.program_.stages - 1 - stage_;
        loan = kernels::Buffer<float>(
            be_, GptActivations::storage_size(owner_.model_, owner_.cut_[position],
                                              owner_.cut_[position + 1], sequences_));
      }
    }
    return loan;
  }

  const PipelinedGpt& owner_;
  int stage_;
  std::shared_ptr<const kernels::Backend> be_;
  bool mirrored_;  // on another device than the home: works on mirrors of the home's buffers
  int64_t scratch_per_sequence_ = 0;
  kernels::Buffer<float> scratch_;
  std::map<Key, std::unique_ptr<GptActivations>> acts_;
  std::map<Key, kernels::Buffer<float>> grad_, loans_;
  // Buffers done with, kept for later micro-batches and steps (per chunk where sizes differ).
  std::vector<std::vector<std::unique_ptr<GptActivations>>> spare_acts_;
  std::vector<std::vector<kernels::Buffer<float>>> spare_loans_;
  std::vector<kernels::Buffer<float>> spare_grads_;
  std::vector<int> next_backward_;  // per chunk: the micro-batch whose backward comes next

  // Mirrors on another GPU than the home's: parameters, gradients, micro-batch scratch [full
  // size; only this stage's regions are used] and the step's tokens.
  kernels::Buffer<float> params_mirror_, grads_mirror_, micro_mirror_;
  kernels::Buffer<int32_t> inputs_mirror_, targets_mirror_;

  // The current step's buffers: the home's (shared by the stages on its device, each writing
  // only its positions' regions of grads and micro_grads) or the mirrors.
  const float* params_ = nullptr;
  const int32_t *inputs_ = nullptr, *targets_ = nullptr;
  int sequences_ = 0;
  float grad_scale_ = 0;
  float *grads_ = nullptr, *micro_grads_ = nullptr;
};

namespace {

std::shared_ptr<const kernels::Backend> stage_backend(const DeviceGroup& group, int gpu,
                                                      int threads) {
  if (!group.cuda) return kernels::make_cpu_backend(threads);
  return kernels::make_cuda_backend(gpu, kernels::Stream::kOwn);
}

}  // namespace

PipelinedGpt::PipelinedGpt(const Gpt& model, const pipeline::PipelineShape& shape,
                           std::shared_ptr<const kernels::Backend> home, const DeviceGroup& group,
                           int threads_per_stage)
    : model_(model), home_(std::move(home)), group_(group) {
  if (const std::string problem = pipeline::check_shape(shape); !problem.empty())
    throw std::invalid_argument("pipeline." + problem);
  if (home_->name() != group.home())
    throw std::invalid_argument("pipeline: the state is on " + std::string(home_->name()) +
                                ", not on the first device of the stages (" + group.home() + ")");
  program_ = pipeline::generate(shape);
  cut_ = cut_blocks(model, shape.stages * shape.chunks);
  const std::vector<int> gpus = group.stage_gpus(shape.stages);
  for (int s = 0; s < shape.stages; ++s)
    stages_.push_back(
        std::make_unique<Stage>(*this, s, stage_backend(group, gpus[s], threads_per_stage)));
}

PipelinedGpt::~PipelinedGpt() = default;

std::vector<std::string> PipelinedGpt::stage_devices() const {
  std::vector<std::string> devices;
  for (const auto& stage : stages_) devices.push_back(stage->backend().name());
  return devices;
}

void PipelinedGpt::set_precision(kernels::Precision precision) {
  for (auto& stage : stages_) stage->backend().set_precision(precision);
}

void PipelinedGpt::gradients(const float* params, const int32_t* inputs, const int32_t* targets,
                             int sequences, float grad_scale, float* grads, float* micro_grads) {
  std::vector<pipeline::StageExecutor*> executors;
  for (auto& stage : stages_) {
    stage->begin_step(params, inputs, targets, sequences, grad_scale, grads, micro_grads);
    executors.push_back(stage.get());
  }
  if (!transport_) transport_ = make_transport();
  try {
    pipeline::run_program(program_, executors, *transport_);
  } catch (...) {
    transport_.reset();
    throw;
  }
  for (auto& stage : stages_) stage->end_step(grads);
}

std::unique_ptr<pipeline::Transport> PipelinedGpt::make_transport() const {
  if (!group_.cuda) return std::make_unique<pipeline::QueueTransport>();
#ifdef HIPPO_HAVE_CUDA_TRANSPORT
  std::vector<CUstream_st*> streams;
  for (const auto& stage : stages_) streams.push_back(stage->backend().cuda_stream());
  return std::make_unique<pipeline::CudaTransport>(program_, group_.stage_gpus(program_.stages),
                                                   streams);
#else
  throw std::invalid_argument(
      "pipeline: stages on GPUs need the CUDA transport, and this hippo "
      "was built without CUDA");
#endif
}

}  // namespace hippo::worker
