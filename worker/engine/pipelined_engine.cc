#include "worker/engine/pipelined_engine.h"

#include <algorithm>
#include <future>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/interpreter.h"
#include "pipeline/queue_transport.h"
#ifdef HIPPO_HAVE_CUDA_TRANSPORT
#include "pipeline/cuda_transport.h"
#endif

namespace hippo::worker {

// The executor of one pipeline stage: the model chunks (positions) of that stage, their
// activations per micro-batch in flight, the gradients between positions, and loans (BPipe).
class PipelinedGpt::Stage final : public pipeline::StageExecutor {
 public:
  Stage(const PipelinedGpt& owner, int stage, std::shared_ptr<const kernels::Backend> be)
      : owner_(owner),
        stage_(stage),
        be_(std::move(be)),
        mirrored_(std::string(be_->name()) != owner.home_->name()),
        vocab_(owner.program_.vocab_parallel),
        spare_acts_(owner.program_.chunks),
        spare_loans_(owner.program_.chunks) {
    const int chunks = owner.program_.chunks;
    int64_t scratch = 0;
    for (int c = 0; c < chunks; ++c) {
      const auto [first, last] = blocks(c);
      scratch = std::max(scratch, GptActivations::scratch_size(owner.model_, first, last, 1));
    }
    scratch_per_sequence_ = scratch;
    if (vocab_) {
      block0_ = first_block(stage), block1_ = first_block(stage + 1);
      token0_ = block0_ * kVocabBlock;
      token1_ = std::min(owner.model_.shape().vocab, block1_ * kVocabBlock);
    }
    lay_out();
  }

  const kernels::Backend& backend() const { return *be_; }

  // Reads this stage's regions of a state's parameters and optimizer state (in the home's memory,
  // laid out as gpt.h and train_state.h say) into its own buffers, and a tied last stage's copy
  // of wte (on the engine's thread, before a step; the gradients' buffers come after the state's
  // are freed, in begin_step).
  void load(const TrainState& s, int optimizer_floats) {
    const int64_t P = owner_.model_.param_count();
    if (params_.size() != params_size_) params_ = kernels::Buffer<float>(be_, params_size_);
    if (opt_.size() != optimizer_floats * owned_)
      opt_ = kernels::Buffer<float>(be_, optimizer_floats * owned_);
    be_->wait_for(*owner_.home_);
    for (const Region& r : param_regions_) {
      be_->copy_from(*owner_.home_, params_.data() + r.local, s.params.data() + r.global,
                     r.size * int64_t{sizeof(float)});
      if (r.local >= owned_) continue;  // a copy: the owner's optimizer state
      for (int k = 0; k < optimizer_floats; ++k)
        be_->copy_from(*owner_.home_, opt_.data() + k * owned_ + r.local,
                       s.opt_state.data() + k * P + r.global, r.size * int64_t{sizeof(float)});
    }
  }

  // Frees its gradients' buffers (a step's scratch: begin_step makes them again), so that the
  // state's assembled copy takes their place instead of adding to the peak (assemble()).
  void drop_gradients() { grads_ = {}, micro_ = {}, tied_scratch_ = {}; }
  // Frees its state's buffers (release()), once the home's copies from them are done.
  void drop_state() {
    drop_gradients();
    params_ = {}, opt_ = {};
  }

  // Writes its owned regions of the parameters and optimizer state into s (assemble()).
  void store(TrainState& s, int optimizer_floats) const {
    const int64_t P = owner_.model_.param_count();
    owner_.home_->wait_for(*be_);
    for (const Region& r : param_regions_) {
      if (r.local >= owned_) continue;
      owner_.home_->copy_from(*be_, s.params.data() + r.global, params_.data() + r.local,
                              r.size * int64_t{sizeof(float)});
      for (int k = 0; k < optimizer_floats; ++k)
        owner_.home_->copy_from(*be_, s.opt_state.data() + k * P + r.global,
                                opt_.data() + k * owned_ + r.local,
                                r.size * int64_t{sizeof(float)});
    }
  }

  // The optimizer's update of its own parameters, with its gradients and optimizer state (the
  // same elementwise kernel as the unpipelined update over the whole buffer: the same bits). A
  // tied head's share of wte's gradient is added in first where the stage has both (vocabulary
  // parallelism; otherwise add_tied_share does it between stages).
  void update(const OptimizerUpdate& u) {
    const Gpt& model = owner_.model_;
    if (vocab_ && model.shape().tied) {
      const int64_t C = model.shape().dim, n = int64_t{token1_ - token0_} * C;
      float* rows = grad(int64_t{token0_} * C);
      be_->add(rows, grad(tied_share() + int64_t{token0_} * C), rows, n);
    }
    if (u.adam)
      be_->adam_update(params_.data(), grads_.data(), opt_.data(), opt_.data() + owned_, owned_,
                       u.adam_params);
    else
      be_->sgd_update(params_.data(), grads_.data(), opt_.data(), owned_, u.sgd);
  }

  // Without vocabulary parallelism, a tied model's wte lives on stage 0 and a copy on the last
  // stage: the head's share of its gradient added into stage 0's before the update (as
  // Gpt::reduce_tied), the updated wte copied back after it.
  static void add_tied_share(Stage& first, Stage& last) {
    const int64_t n = int64_t{first.owner_.model_.shape().vocab} * first.owner_.model_.shape().dim;
    const float* share = last.grad(last.tied_share());
    if (std::string(first.be_->name()) == last.be_->name()) {  // one memory: host, one GPU
      first.be_->wait_for(*last.be_);
    } else {  // another GPU: copied over first
      if (first.tied_scratch_.size() != n)
        first.tied_scratch_ = kernels::Buffer<float>(first.be_, n);
      first.be_->copy_from(*last.be_, first.tied_scratch_.data(), share,
                           n * int64_t{sizeof(float)});
      share = first.tied_scratch_.data();
    }
    first.be_->add(first.grad(0), share, first.grad(0), n);
  }
  static void copy_tied_weight(const Stage& first, Stage& last) {
    const int64_t n = int64_t{first.owner_.model_.shape().vocab} * first.owner_.model_.shape().dim;
    last.be_->copy_from(*first.be_, last.params_.data() + last.owned_, first.param(0),
                        n * int64_t{sizeof(float)});
  }
  // Whether this stage holds a copy of wte (a tied head without vocabulary parallelism).
  bool has_tied_copy() const { return params_size_ > owned_; }

  // Before each run of the program (on the engine's thread): this stage's buffers and tokens, its
  // work ordered after the home's.
  void begin_step(const int32_t* inputs, const int32_t* targets, int sequences, float grad_scale) {
    const Gpt& model = owner_.model_;
    acts_.clear();  // a failed step may have left some
    loans_.clear();
    grad_.clear();
    drop_vocab_buffers();
    for (auto& [key, b] : logits_) give(std::move(b));
    logits_.clear();
    if (sequences != sequences_) {  // another batch size: the kept buffers do not fit
      for (auto& spare : spare_acts_) spare.clear();
      for (auto& spare : spare_loans_) spare.clear();
      spare_grads_.clear();
      spare_vocab_.clear();
    }
    norms_.clear();
    next_vocab_backward_ = next_embed_backward_ = 0;
    sequences_ = sequences;
    grad_scale_ = grad_scale;
    next_backward_.assign(owner_.program_.chunks, 0);
    const int64_t scratch = scratch_per_sequence_ * sequences;
    if (scratch_.size() < scratch) scratch_ = kernels::Buffer<float>(be_, scratch);
    if (grads_.empty()) {  // the first step since a load
      grads_ = kernels::Buffer<float>(be_, grads_size_);
      if (owner_.program_.microbatches > 1) micro_ = kernels::Buffer<float>(be_, grads_size_);
    }
    be_->wait_for(*owner_.home_);  // the tokens' upload, the last update
    if (!mirrored_) {
      inputs_ = inputs, targets_ = targets;
      return;
    }
    // Another GPU: the step's tokens, copied there.
    const int64_t tokens =
        int64_t{owner_.program_.microbatches} * sequences * model.shape().context;
    if (inputs_mirror_.size() < tokens) {
      inputs_mirror_ = kernels::Buffer<int32_t>(be_, tokens);
      targets_mirror_ = kernels::Buffer<int32_t>(be_, tokens);
    }
    const int64_t token_bytes = tokens * int64_t{sizeof(int32_t)};
    be_->copy_from(*owner_.home_, inputs_mirror_.data(), inputs, token_bytes);
    be_->copy_from(*owner_.home_, targets_mirror_.data(), targets, token_bytes);
    inputs_ = inputs_mirror_.data(), targets_ = targets_mirror_.data();
  }

  // After the program (on the engine's thread): nothing may remain in flight.
  void end_step() {
    if (!acts_.empty() || !loans_.empty())
      throw std::logic_error("pipeline stage " + std::to_string(stage_) +
                             " ended a step with stashed activations");
    for (auto& [key, g] : grad_) spare_grads_.push_back(std::move(g));
    grad_.clear();
    drop_vocab_buffers();  // what was only sent: a shard's embedding, its input gradient
  }

  void forward(int mb, int chunk) override {
    GptActivations& a = activations(mb, chunk);
    if (vocab_ && first_position(chunk)) embedding_sum(mb, a.input());
    a.forward(batch(mb), chunk_params(chunk));
    if (vocab_ && last_position(chunk)) final_norm(mb, a.output());
    note_memory();
  }

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
    float* dy = gradient(mb, chunk).data();
    if (vocab_ && last_position(chunk)) final_norm_backward(mb, it->second->output(), dy);
    const auto [first, last] = blocks(chunk);
    const int64_t lo = owner_.model_.grad_offset(first);
    it->second->backward(batch(mb), chunk_params(chunk), dy, grad(mb, lo) - lo, scratch_.data());
    accumulate(mb, lo, owner_.model_.grad_offset(last));
    if (vocab_ && first_position(chunk))  // dL/d(embedding), for every shard's embed backward
      be_->copy(vocab_buffer(pipeline::Buffer::kEmbedGradient, mb, 0).data(), dy,
                rows() * owner_.model_.shape().dim * int64_t{sizeof(float)});
    keep(acts_, it, spare_acts_[chunk]);
    note_memory();
  }

  // The vocabulary passes (pipelined_engine.h): this stage's shard, vocabulary blocks
  // [block0_, block1_), tokens [token0_, token1_). Host memory (CPU stages only).

  // The shard's rows of wte for the micro-batch's tokens, 0 for the others' tokens.
  void embed_forward(int mb) override {
    if (stage_ != 0) drop_before(pipeline::Buffer::kEmbedding, mb);  // sent already
    const int C = owner_.model_.shape().dim;
    float* out = vocab_buffer(pipeline::Buffer::kEmbedding, mb, 0).data();
    const int32_t* tokens = batch(mb).inputs;
    const float* wte = param(int64_t{token0_} * C) - int64_t{token0_} * C;  // the shard's rows
    for (int64_t r = 0; r < rows(); ++r) {
      float* o = out + r * C;
      if (mine(tokens[r]))
        std::copy_n(wte + int64_t{tokens[r]} * C, C, o);
      else
        std::fill_n(o, C, 0.0f);
    }
    note_memory();
  }

  // Stage 0's forward input: the shards' embeddings summed in stage order (one of them holds a
  // token's row, the others 0: the row itself), plus wpe, as the embedding kernel adds them.
  void embedding_sum(int mb, float* x) {
    const GptShape& s = owner_.model_.shape();
    const int64_t n = rows() * s.dim, per_sequence = int64_t{s.context} * s.dim;
    using pipeline::Buffer;
    be_->add(vocab_buffer(Buffer::kEmbedding, mb, 0).data(),
             vocab_buffer(Buffer::kEmbeddingIn, mb, 1).data(), x, n);
    for (int q = 2; q < owner_.program_.stages; ++q)
      be_->add(x, vocab_buffer(Buffer::kEmbeddingIn, mb, q).data(), x, n);
    const float* wpe = param(int64_t{s.vocab} * s.dim);
    for (int b = 0; b < sequences_; ++b)
      be_->add(x + b * per_sequence, wpe, x + b * per_sequence, per_sequence);
    drop({Buffer::kEmbedding, mb, 0});
    for (int q = 1; q < owner_.program_.stages; ++q) drop({Buffer::kEmbeddingIn, mb, q});
  }

  // The shard's rows of wte's gradient (stage 0: and wpe's), as the embedding kernel sums them:
  // each row from 0, the positions in ascending order.
  void embed_backward(int mb) override {
    check_order("embed backward", mb, next_embed_backward_);
    const GptShape& s = owner_.model_.shape();
    const int C = s.dim;
    const float* g = vocab_buffer(pipeline::Buffer::kEmbedGradient, mb, 0).data();
    const int32_t* tokens = batch(mb).inputs;
    float* rows0 = grad(mb, int64_t{token0_} * C);  // the shard's rows of wte's gradient
    std::fill(rows0, rows0 + int64_t{token1_ - token0_} * C, 0.0f);
    for (int64_t r = 0; r < rows(); ++r) {
      if (!mine(tokens[r])) continue;
      float* d = rows0 + int64_t{tokens[r] - token0_} * C;
      for (int c = 0; c < C; ++c) d[c] += g[r * C + c];
    }
    accumulate(mb, int64_t{token0_} * C, int64_t{token1_} * C);
    if (stage_ == 0) {
      float* dwpe = grad(mb, int64_t{s.vocab} * C);
      for (int t = 0; t < s.context; ++t) {
        float* d = dwpe + int64_t{t} * C;
        std::fill_n(d, C, 0.0f);
        for (int b = 0; b < sequences_; ++b)
          for (int c = 0; c < C; ++c) d[c] += g[(int64_t{b} * s.context + t) * C + c];
      }
      accumulate(mb, int64_t{s.vocab} * C, int64_t{s.vocab + s.context} * C);
    }
    drop({pipeline::Buffer::kEmbedGradient, mb, 0});
    note_memory();
  }

  // The shard's logits from the final hidden state, and its blocks' statistics.
  void vocab_forward(int mb) override {
    const GptShape& s = owner_.model_.shape();
    const int tokens = token1_ - token0_;
    kernels::Buffer<float>& logits = logits_[mb];
    if (logits.size() != rows() * tokens) logits = take(rows() * tokens);
    be_->gemm(false, true, static_cast<int>(rows()), tokens, s.dim, 1.0f,
              vocab_buffer(pipeline::Buffer::kVocabInput, mb, 0).data(), output_weight(), 0.0f,
              logits.data());
    vocab_block_stats(logits.data(), rows(), tokens, s.vocab, block0_, block1_,
                      vocab_buffer(pipeline::Buffer::kVocabStats, mb, 0).data());
    note_memory();
  }

  // With every block's statistics: the shard's dlogits, its rows of the output layer's gradient
  // and its blocks' parts of the input gradient.
  void vocab_backward(int mb) override {
    using pipeline::Buffer;
    check_order("vocab backward", mb, next_vocab_backward_);
    if (stage_ != owner_.program_.stages - 1) drop_before(Buffer::kVocabGradient, mb);
    const GptShape& s = owner_.model_.shape();
    const int p = owner_.program_.stages, tokens = token1_ - token0_;
    std::vector<float> stats(static_cast<size_t>(vocab_blocks(s.vocab)) * rows() * 2);
    for (int q = 0; q < p; ++q) {
      const std::span<float> from = q == stage_ ? vocab_buffer(Buffer::kVocabStats, mb, 0)
                                                : vocab_buffer(Buffer::kVocabStatsIn, mb, q);
      std::copy(from.begin(), from.end(), stats.begin() + first_block(q) * rows() * 2);
    }
    if (dlogits_.size() < rows() * tokens) dlogits_ = kernels::Buffer<float>(be_, rows() * tokens);
    vocab_softmax(logits_.at(mb).data(), rows(), tokens, s.vocab, block0_, block1_, stats.data(),
                  batch(mb).targets, nullptr, dlogits_.data(), grad_scale_);
    const int64_t dw = owner_.model_.grad_offset(owner_.model_.blocks().size() - 1) +
                       2 * int64_t{s.dim} + int64_t{token0_} * s.dim;
    vocab_output_backward(*be_, rows(), s.dim, s.vocab, block0_, block1_, dlogits_.data(),
                          vocab_buffer(Buffer::kVocabInput, mb, 0).data(), output_weight(),
                          grad(mb, dw), vocab_buffer(Buffer::kVocabGradient, mb, 0).data());
    accumulate(mb, dw, dw + int64_t{tokens} * s.dim);
    // The statistics of every block, held until here (the only buffer not a member).
    note_memory(int64_t{sizeof(float)} * std::ssize(stats));
    drop({Buffer::kVocabInput, mb, 0});
    drop({Buffer::kVocabStats, mb, 0});
    for (int q = 0; q < p; ++q) drop({Buffer::kVocabStatsIn, mb, q});
    give(std::move(logits_.at(mb)));
    logits_.erase(mb);
  }

  void optimizer_step() override {}  // the update runs over the whole buffer after the program

  std::span<float> buffer(pipeline::Buffer which, int mb, int chunk) override {
    const std::span<float> b = find_buffer(which, mb, chunk);
    note_memory();  // a receive's buffer may be new
    return b;
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

  // The most bytes this stage's own buffers held at once, over every step so far (they are
  // kept from step to step, so the peak is reached in the first steps and stays).
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  std::span<float> find_buffer(pipeline::Buffer which, int mb, int chunk) {
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
        if (vocab_) return vocab_buffer(which, mb, chunk);
        break;
    }
    throw std::logic_error("pipeline stage: unknown buffer");
  }

  // What this stage's buffers hold now (activations, their spares, gradients between stages,
  // loans, vocabulary buffers, scratch, its state: parameters, gradients, optimizer state, token
  // mirrors), plus `transient` bytes, into the peak.
  void note_memory(int64_t transient = 0) {
    int64_t floats = 0;
    auto add = [&](const kernels::Buffer<float>& b) { floats += b.size(); };
    for (const auto& [key, a] : acts_) floats += std::ssize(a->storage());
    for (const auto& spares : spare_acts_)
      for (const auto& a : spares) floats += std::ssize(a->storage());
    for (const auto* map : {&grad_, &loans_})
      for (const auto& [key, b] : *map) add(b);
    for (const auto& spares : spare_loans_)
      for (const auto& b : spares) add(b);
    for (const auto& b : spare_grads_) add(b);
    for (const auto& [key, b] : vocab_buffers_) add(b);
    for (const auto& [size, b] : spare_vocab_) add(b);
    for (const auto* map : {&logits_, &norms_})
      for (const auto& [key, b] : *map) add(b);
    for (const auto* b :
         {&params_, &grads_, &micro_, &opt_, &tied_scratch_, &dlogits_, &dnorm_, &scratch_})
      add(*b);
    const int64_t tokens = inputs_mirror_.size() + targets_mirror_.size();
    peak_bytes_ = std::max(peak_bytes_, floats * int64_t{sizeof(float)} +
                                            tokens * int64_t{sizeof(int32_t)} + transient);
  }

  // Moves a buffer that is done with into the spares of its kind, for a later micro-batch.
  template <typename Map, typename Spares>
  static void keep(Map& map, typename Map::iterator it, Spares& spares) {
    spares.push_back(std::move(it->second));
    map.erase(it);
  }

  // The blocks this stage's chunk runs: with vocabulary parallelism the first and last
  // positions leave the embedding and the head to the vocabulary passes.
  std::pair<size_t, size_t> blocks(int chunk) const {
    return position_blocks(owner_.cut_, chunk * owner_.program_.stages + stage_, vocab_);
  }
  bool first_position(int chunk) const { return stage_ == 0 && chunk == 0; }
  bool last_position(int chunk) const {
    return stage_ == owner_.program_.stages - 1 && chunk == owner_.program_.chunks - 1;
  }

  // Micro-batch 1, 2, ...'s gradient of [lo, hi) (global offsets) added from micro_ into grads_.
  void accumulate(int mb, int64_t lo, int64_t hi) {
    if (mb > 0) be_->add(grad(0, lo), grad(mb, lo), grad(0, lo), hi - lo);
  }

  void check_order(const char* pass, int mb, int& next) const {
    if (mb != next++)
      throw std::logic_error("pipeline stage " + std::to_string(stage_) + ": " + pass +
                             " of micro-batch " + std::to_string(mb) + " out of ascending order");
  }

  int64_t rows() const { return int64_t{sequences_} * owner_.model_.shape().context; }
  bool mine(int32_t token) const { return token >= token0_ && token < token1_; }
  int first_block(int stage) const {
    return shard_block(owner_.model_.shape().vocab, owner_.program_.stages, stage);
  }
  // The shard's rows of the output layer's weight (wte when tied).
  const float* output_weight() const {
    const Gpt& model = owner_.model_;
    const int64_t w = model.shape().tied
                          ? 0
                          : model.param_offset(model.blocks().size() - 1) + 2 * model.shape().dim;
    return param(w + int64_t{token0_} * model.shape().dim);
  }

  // The last position's final layer norm: its output is the output layer's input, sent to every
  // stage; its mean and rstd kept for the backward.
  void final_norm(int mb, const float* x) {
    const Gpt& model = owner_.model_;
    const int C = model.shape().dim;
    const float* w = param(model.param_offset(model.blocks().size() - 1));
    kernels::Buffer<float>& norm = norms_[mb];
    if (norm.size() != 2 * rows()) norm = kernels::Buffer<float>(be_, 2 * rows());
    be_->layernorm_forward(x, w, w + C, vocab_buffer(pipeline::Buffer::kVocabInput, mb, 0).data(),
                           norm.data(), norm.data() + rows(), rows(), C);
  }

  // Its backward, as the head's: the input gradient's parts from every stage summed in block
  // order, then through the layer norm into grad (dL/d(x), which the head starts).
  void final_norm_backward(int mb, const float* x, float* dx) {
    using pipeline::Buffer;
    const Gpt& model = owner_.model_;
    const int C = model.shape().dim, p = owner_.program_.stages;
    std::vector<const float*> parts;
    for (int q = 0; q < p; ++q) {
      const float* from = (q == stage_ ? vocab_buffer(Buffer::kVocabGradient, mb, 0)
                                       : vocab_buffer(Buffer::kVocabGradientIn, mb, q))
                              .data();
      for (int k = first_block(q); k < first_block(q + 1); ++k)
        parts.push_back(from + (k - first_block(q)) * rows() * C);
    }
    if (dnorm_.size() < rows() * C) dnorm_ = kernels::Buffer<float>(be_, rows() * C);
    sum_vocab_parts(*be_, parts, rows(), C, dnorm_.data());
    const int64_t head = model.param_offset(model.blocks().size() - 1);
    const float* w = param(head);
    const float* norm = norms_.at(mb).data();
    be_->fill_zero(dx, rows() * C * int64_t{sizeof(float)});
    be_->layernorm_backward(dnorm_.data(), x, w, norm, norm + rows(), dx, grad(mb, head),
                            grad(mb, head) + C, rows(), C);
    accumulate(mb, head, head + 2 * int64_t{C});
    norms_.erase(mb);
    drop({Buffer::kVocabGradient, mb, 0});
    for (int q = 0; q < p; ++q) drop({Buffer::kVocabGradientIn, mb, q});
  }

  // A vocabulary buffer of micro-batch mb (`slot`: the other stage for those received), sized
  // by its kind.
  std::span<float> vocab_buffer(pipeline::Buffer which, int mb, int slot) {
    using pipeline::Buffer;
    const int64_t C = owner_.model_.shape().dim;
    const int stage =
        which == Buffer::kVocabStatsIn || which == Buffer::kVocabGradientIn ? slot : stage_;
    const int64_t blocks = first_block(stage + 1) - first_block(stage);
    int64_t size = rows() * C;
    if (which == Buffer::kVocabStats || which == Buffer::kVocabStatsIn) size = blocks * rows() * 2;
    if (which == Buffer::kVocabGradient || which == Buffer::kVocabGradientIn)
      size = blocks * rows() * C;
    kernels::Buffer<float>& b = vocab_buffers_[{which, mb, slot}];
    if (b.size() != size) {
      give(std::move(b));
      b = take(size);
    }
    return {b.data(), static_cast<size_t>(size)};
  }

  // Done with this stage's buffers of a kind for the micro-batches before mb (sent).
  void drop_before(pipeline::Buffer which, int mb) {
    for (auto it = vocab_buffers_.begin(); it != vocab_buffers_.end();) {
      if (std::get<0>(it->first) == which && std::get<1>(it->first) < mb) {
        give(std::move(it->second));
        it = vocab_buffers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void drop(const std::tuple<pipeline::Buffer, int, int>& key) {
    if (const auto it = vocab_buffers_.find(key); it != vocab_buffers_.end()) {
      give(std::move(it->second));
      vocab_buffers_.erase(it);
    }
  }
  void drop_vocab_buffers() {
    for (auto& [key, b] : vocab_buffers_) give(std::move(b));
    vocab_buffers_.clear();
  }

  // The vocabulary passes' buffers done with, kept by size for later micro-batches and steps
  // (a logits buffer is tens of MiB: allocating it anew each micro-batch costs its page faults).
  kernels::Buffer<float> take(int64_t size) {
    const auto it = spare_vocab_.find(size);
    if (it == spare_vocab_.end()) return kernels::Buffer<float>(be_, size);
    kernels::Buffer<float> b = std::move(it->second);
    spare_vocab_.erase(it);
    return b;
  }
  void give(kernels::Buffer<float>&& b) {
    if (!b.empty()) spare_vocab_.emplace(b.size(), std::move(b));
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
  bool mirrored_;  // on another device than the home: reads the tokens from mirrors
  bool vocab_;     // the program has vocabulary passes
  // This stage's vocabulary shard: blocks [block0_, block1_), tokens [token0_, token1_).
  int block0_ = 0, block1_ = 0, token0_ = 0, token1_ = 0;
  // Per micro-batch: the vocabulary buffers (kind, micro-batch, slot), the shard's logits from
  // its forward to its backward, the final layer norm's mean and rstd (last stage); the
  // backward's dlogits and the summed input gradient (reused).
  std::map<std::tuple<pipeline::Buffer, int, int>, kernels::Buffer<float>> vocab_buffers_;
  std::map<int, kernels::Buffer<float>> logits_, norms_;
  std::multimap<int64_t, kernels::Buffer<float>> spare_vocab_;
  kernels::Buffer<float> dlogits_, dnorm_;
  int next_vocab_backward_ = 0, next_embed_backward_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t scratch_per_sequence_ = 0;
  kernels::Buffer<float> scratch_;
  std::map<Key, std::unique_ptr<GptActivations>> acts_;
  std::map<Key, kernels::Buffer<float>> grad_, loans_;
  // Buffers done with, kept for later micro-batches and steps (per chunk where sizes differ).
  std::vector<std::vector<std::unique_ptr<GptActivations>>> spare_acts_;
  std::vector<std::vector<kernels::Buffer<float>>> spare_loans_;
  std::vector<kernels::Buffer<float>> spare_grads_;
  std::vector<int> next_backward_;  // per chunk: the micro-batch whose backward comes next

  // This stage's state (pipelined_engine.h): regions of the model's parameters in gpt.h's
  // layout, one after another in params_ (the owned ones, sorted, then a tied last stage's copy
  // of wte); the gradient buffer's regions likewise in grads_ and micro_ (micro-batches 1, 2,
  // ...), the owned parameters' first, aligned with params_, then a tied head's share of wte's
  // gradient; the optimizer state of the owned parameters in opt_ (sgd: momentum; adam: m, v).
  struct Region {
    int64_t global = 0, local = 0, size = 0;
  };
  std::vector<Region> param_regions_, grad_regions_;
  int64_t owned_ = 0, params_size_ = 0, grads_size_ = 0;
  kernels::Buffer<float> params_, grads_, micro_, opt_;
  // Stage 0, when the last stage is on another GPU: the last stage's share of wte's gradient.
  kernels::Buffer<float> tied_scratch_;

  // On another GPU than the home's: the step's tokens.
  kernels::Buffer<int32_t> inputs_mirror_, targets_mirror_;
  const int32_t *inputs_ = nullptr, *targets_ = nullptr;
  int sequences_ = 0;
  float grad_scale_ = 0;

  // The regions of this stage's state (see above).
  void lay_out() {
    const Gpt& model = owner_.model_;
    const GptShape& s = model.shape();
    const int64_t C = s.dim, V = s.vocab;
    const size_t n = model.blocks().size();
    const int64_t head = model.param_offset(n - 1);
    std::vector<std::pair<int64_t, int64_t>> owned;  // [global, size)
    bool has_head = false, has_embedding = false;
    for (int c = 0; c < owner_.program_.chunks; ++c) {
      const auto [first, last] = blocks(c);
      owned.push_back(
          {model.param_offset(first), model.param_offset(last) - model.param_offset(first)});
      has_head |= last == n;
      has_embedding |= first == 0;
    }
    const int64_t rows0 = int64_t{token0_} * C, rows = int64_t{token1_ - token0_} * C;
    if (vocab_) {
      owned.push_back({rows0, rows});                                            // wte's rows
      if (stage_ == 0) owned.push_back({V * C, int64_t{s.context} * C});         // wpe
      if (stage_ == owner_.program_.stages - 1) owned.push_back({head, 2 * C});  // lnf
      if (!s.tied) owned.push_back({head + 2 * C + rows0, rows});  // the output layer's rows
    }
    std::sort(owned.begin(), owned.end());
    for (const auto& [global, size] : owned) {
      param_regions_.push_back({global, owned_, size});
      grad_regions_.push_back({global, owned_, size});
      owned_ += size;
    }
    params_size_ = grads_size_ = owned_;
    if (!s.tied || !(has_head || vocab_)) return;
    // A tied head: its share of wte's gradient (its shard's rows with vocabulary parallelism),
    // right after the head's own region, and without vocabulary parallelism a copy of wte.
    const int64_t share = vocab_ ? rows : V * C;
    grad_regions_.push_back({tied_share() + (vocab_ ? rows0 : 0), grads_size_, share});
    grads_size_ += share;
    if (!vocab_ && !has_embedding) {
      param_regions_.push_back({0, params_size_, V * C});
      params_size_ += V * C;
    }
  }

  // Where a tied head's share of wte's gradient starts in the model's gradient buffer.
  int64_t tied_share() const {
    const Gpt& model = owner_.model_;
    return model.grad_offset(model.blocks().size() - 1) + 2 * int64_t{model.shape().dim};
  }

  // The value at `global` (gpt.h's layout) in this stage's buffer of regions; what follows it up
  // to the region's end is contiguous.
  static int64_t local(const std::vector<Region>& regions, int64_t global, int stage) {
    for (const Region& r : regions)
      if (global >= r.global && global < r.global + r.size) return r.local + (global - r.global);
    throw std::logic_error("pipeline stage " + std::to_string(stage) + ": offset " +
                           std::to_string(global) + " is not in its state");
  }
  const float* param(int64_t global) const {
    return params_.data() + local(param_regions_, global, stage_);
  }
  // Micro-batch 0 writes its gradient into grads_, later ones into micro_ (accumulate adds it).
  float* grad(int mb, int64_t global) {
    return (mb == 0 ? grads_ : micro_).data() + local(grad_regions_, global, stage_);
  }
  float* grad(int64_t global) { return grad(0, global); }

  // The parameters as chunk c's blocks read them: each at its global offset from `at` (the
  // chunk's region is contiguous here, so `at` is shifted back by where it starts), a tied head
  // wte at the stage's copy (or own rows).
  ParamView chunk_params(int chunk) const {
    const int64_t first = owner_.model_.param_offset(blocks(chunk).first);
    const float* at = param(first) - first;
    const bool tied_head = owner_.model_.shape().tied && !vocab_ &&
                           blocks(chunk).second == owner_.model_.blocks().size();
    return {at, tied_head ? param(0) : at};
  }
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
  if (shape.vocab_parallel) {
    if (group.cuda)
      throw std::invalid_argument(
          "pipeline.vocab_parallel: the vocabulary passes run on CPU stages only, not on " +
          group.home());
    const int blocks = vocab_blocks(model.shape().vocab);
    if (blocks < shape.stages)
      throw std::invalid_argument(
          "pipeline.vocab_parallel: a vocabulary of " + std::to_string(model.shape().vocab) +
          " tokens is " + std::to_string(blocks) + " blocks of " + std::to_string(kVocabBlock) +
          ", fewer than the " + std::to_string(shape.stages) + " stages");
  }
  program_ = pipeline::generate(shape);
  cut_ = cut_blocks(model, shape.stages * shape.chunks, shape.vocab_parallel);
  const std::vector<int> gpus = group.stage_gpus(shape.stages);
  for (int s = 0; s < shape.stages; ++s)
    stages_.push_back(
        std::make_unique<Stage>(*this, s, stage_backend(group, gpus[s], threads_per_stage)));
}

PipelinedGpt::~PipelinedGpt() = default;

std::vector<int64_t> PipelinedGpt::stage_peak_bytes() const {
  std::vector<int64_t> bytes;
  for (const auto& stage : stages_) bytes.push_back(stage->peak_bytes());
  return bytes;
}

std::vector<std::string> PipelinedGpt::stage_devices() const {
  std::vector<std::string> devices;
  for (const auto& stage : stages_) devices.push_back(stage->backend().name());
  return devices;
}

void PipelinedGpt::set_precision(kernels::Precision precision) {
  for (auto& stage : stages_) stage->backend().set_precision(precision);
}

void PipelinedGpt::step(TrainState& s, bool load, const int32_t* inputs, const int32_t* targets,
                        int sequences, float grad_scale, const OptimizerUpdate& update) {
  if (load) {
    optimizer_floats_ = update.adam ? 2 : 1;
    for (auto& stage : stages_) stage->load(s, optimizer_floats_);
    // The stages' copies (on their streams) read s's buffers: done before they are freed.
    for (auto& stage : stages_) stage->backend().finish();
    s.params = {};
    s.opt_state = {};
    held_ = true, lost_ = false;
  }
  if (!held_) throw std::logic_error("pipeline: a step without a state (none was loaded)");
  std::vector<pipeline::StageExecutor*> executors;
  for (auto& stage : stages_) {
    stage->begin_step(inputs, targets, sequences, grad_scale);
    executors.push_back(stage.get());
  }
  if (!transport_) transport_ = make_transport();
  try {
    pipeline::run_program(program_, executors, *transport_);
  } catch (...) {
    transport_.reset();
    throw;
  }
  for (auto& stage : stages_) stage->end_step();
  Stage &first = *stages_.front(), &last = *stages_.back();
  if (last.has_tied_copy()) Stage::add_tied_share(first, last);
  // Each stage's update on a thread of its own, as on devices of their own. Until all are done
  // (and the tied copy refreshed) the stages' state is not one step's.
  lost_ = true;
  std::vector<std::future<void>> updates;
  for (auto& stage : stages_)
    updates.push_back(std::async(std::launch::async, [&stage, &update] { stage->update(update); }));
  for (auto& done : updates) done.get();  // rethrows a stage's error
  if (last.has_tied_copy()) Stage::copy_tied_weight(first, last);
  lost_ = false;
  // The home's next work (the next step's tokens, an assembly) after every stage's of this
  // step, as every stage's next step is after the home's (begin_step).
  for (auto& stage : stages_) home_->wait_for(stage->backend());
}

void PipelinedGpt::assemble(TrainState& s) {
  if (!held_) throw std::logic_error("pipeline: no state to assemble (none was loaded)");
  if (lost_)
    throw std::runtime_error("pipeline: a stage's update failed, the stages' state is lost");
  for (const auto& stage : stages_) stage->drop_gradients();
  const int64_t P = model_.param_count();
  s.params = kernels::Buffer<float>(home_, P);
  s.opt_state = kernels::Buffer<float>(home_, optimizer_floats_ * P);
  for (const auto& stage : stages_) stage->store(s, optimizer_floats_);
}

void PipelinedGpt::release() {
  home_->finish();  // assemble's copies (on the home's stream) read the stages' buffers
  for (auto& stage : stages_) stage->drop_state();
  held_ = false;
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
