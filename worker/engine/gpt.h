// The `gpt` model: a decoder-only transformer in GPT-2's layout (token and position embeddings,
// pre-norm blocks of causal self-attention and a GELU MLP, a final layer norm and an output layer
// tied to the token embedding or not), as a list of blocks with explicit forward and backward
// passes. The blocks are also the unit by which the pipelined engine cuts the model into stages.
//
//   {"type": "gpt", "layers": 2, "heads": 4, "dim": 128, "context": 64, "vocab": 96}
//   optional "tied": true (the default) shares the token embedding with the output layer.
//
// Blocks, on B sequences of T = context tokens, C = dim channels, V = vocab tokens:
//   embedding    tokens[B, T] -> x[B, T, C]          params wte[V, C], wpe[T, C]
//   transformer  x -> x + attn(ln1(x)) = x2 -> x2 + mlp(ln2(x2))    (`layers` of them)
//                params ln1 w, b [C]; qkv W [3C, C], b [3C]; proj W [C, C], b [C];
//                ln2 w, b [C]; fc W [4C, C], b [4C]; fcproj W [C, 4C], b [C]
//   head         x -> losses[B, T]: final layer norm, logits = ln(x) W^T (no bias), softmax
//                cross-entropy against the next tokens. params lnf w, b [C], then W [V, C]
//                unless tied (W is then wte).
// All parameters are one contiguous buffer in that order. Initialization as GPT-2 / nanoGPT:
// weights and embeddings normal(0, 0.02), the two residual projections (proj, fcproj)
// normal(0, 0.02 / sqrt(2 layers)), biases 0, layer-norm weights 1; parameter i drawn from the
// counter-based generator at (seed, init, 0, i) (Box-Muller on one 64-bit draw).
//
// Gradients. A block's backward overwrites its region of the gradient buffer. The gradient buffer
// is laid out as the parameters, plus, when tied, V x C more values at the end: the head's share
// of wte's gradient, kept apart so that the head never writes into the embedding's region (in a
// pipeline they live on different stages). reduce_tied() adds it into wte's region once per
// optimizer step, after every micro-batch: wte's gradient is (embedding part) + (head part), the
// same sum whether or not the model is pipelined.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/kernels.h"
#include "pipeline/shape.h"

namespace hippo::worker {

struct GptShape {
  int layers = 0, heads = 0, dim = 0, context = 0, vocab = 0;
  bool tied = true;

  // From the model spec; throws std::invalid_argument naming the bad field ("model.heads: ...").
  static GptShape parse(const nlohmann::json& spec);
};

// A micro-batch as the blocks see it (token buffers in the backend's memory).
struct TokenBatch {
  int sequences = 0;                 // B
  const int32_t* inputs = nullptr;   // [B, T]
  const int32_t* targets = nullptr;  // [B, T]: inputs shifted by one
  // d(step loss) / d(one token's loss): 1 / (tokens of the whole optimizer step); 0 in evaluation
  // (the head then computes no logit gradients).
  float grad_scale = 0;
};

// The vocabulary in fixed blocks of kVocabBlock tokens (the last may be shorter). The output
// layer's softmax reduces them in block order: block k's max m_k and sum s_k of exp(l - m_k) over
// its tokens in order; then M = the largest m_k and total = the sum over k in order of
// s_k exp(m_k - M); loss = log(total) - (l[target] - M), dlogits_j = g (exp(l_j - M) / total),
// minus g at the target (g = grad_scale). The gradient of the output layer's input sums each
// block's part (its dlogits times its rows of W) in block order. A vocabulary-parallel pipeline
// (pipelined_engine.h) gives each stage whole blocks, so it computes the same bits whatever the
// number of stages. With one block (vocab <= kVocabBlock, e.g. the character-level gpt) these are
// the softmax kernel's bits; with more, the head computes them in host memory (a CPU backend;
// on CUDA it keeps the kernel over the whole vocabulary, and vocab_parallel is refused there).
constexpr int kVocabBlock = pipeline::kVocabBlock;
inline int vocab_blocks(int vocab) {
  return (vocab + kVocabBlock - 1) / kVocabBlock;
}

// Host memory. logits[rows, ld]: column 0 is token first * kVocabBlock, blocks [first, last).
// Writes stats[(k - first) * rows * 2 + 2 r + {0: m_k, 1: s_k}] of each block k in the range.
void vocab_block_stats(const float* logits, int64_t rows, int ld, int vocab, int first, int last,
                       float* stats);
// From every block's stats [vocab_blocks(vocab)][rows][2] (as above, first = 0): the loss of each
// row whose target is in blocks [first, last) into losses (others untouched; losses may be null),
// and, unless dlogits is null, the range's dlogits block by block: block k's [rows, its tokens]
// at dlogits + (k - first) * rows * kVocabBlock.
void vocab_softmax(const float* logits, int64_t rows, int ld, int vocab, int first, int last,
                   const float* stats, const int32_t* targets, float* losses, float* dlogits,
                   float grad_scale);
// The output layer's backward over blocks [first, last) from their dlogits (as vocab_softmax
// writes them), with x[rows, C] its input and w, dw the range's rows of W[vocab, C] and of its
// gradient (dw overwritten): each block's part of dL/dx into parts[(k - first) * rows * C].
void vocab_output_backward(const kernels::Backend& be, int64_t rows, int C, int vocab, int first,
                           int last, const float* dlogits, const float* x, const float* w,
                           float* dw, float* parts);
// dx[rows, C] = the sum of the blocks' parts (each [rows, C]) in block order (at least 2).
void sum_vocab_parts(const kernels::Backend& be, const std::vector<const float*>& parts,
                     int64_t rows, int C, float* dx);

// Where the blocks find the parameters: each block at its offset from `at` (the layout above),
// and a tied output layer wte at `wte`. One buffer of the whole model is both; a pipeline stage
// keeps only its own regions of it, and a tied last stage a copy of wte (pipelined_engine.h).
struct ParamView {
  // Implicit: a pointer is the whole model's buffer, the usual case.
  ParamView(const float* params) : at(params), wte(params) {}
  ParamView(const float* at_, const float* wte_) : at(at_), wte(wte_) {}
  const float* at;
  const float* wte;
};

class GptBlock {
 public:
  virtual ~GptBlock() = default;
  virtual const char* kind() const = 0;  // "embedding", "transformer" or "head"
  virtual int64_t param_count() const = 0;
  // Values of the gradient buffer this block writes (the head's includes wte's share when tied).
  virtual int64_t grad_count() const { return param_count(); }
  // Multiply-adds per token of the forward pass (the backward is about twice): the cost that the
  // pipelined engine balances.
  virtual double cost() const = 0;
  // Floats per batch of B sequences: the output (y), the values kept from forward to backward
  // (saved), and backward-only scratch.
  virtual int64_t out_size(int B) const = 0;
  virtual int64_t saved_size(int B) const = 0;
  virtual int64_t scratch_size(int B) const = 0;

  // y from x[B, T, C] (the embedding reads the batch's tokens instead). A block finds its own
  // values at its offset from params.at (and the tied head wte at params.wte).
  virtual void forward(const kernels::Backend& be, const TokenBatch& batch, ParamView params,
                       const float* x, float* y, float* saved) const = 0;
  // grad[B, T, C] holds dL/dy on entry (the head ignores it) and dL/dx on return (the embedding
  // leaves it as it is): the residual stream's gradient, updated in place. Writes this block's
  // region of the gradient buffer `grads` (laid out as Gpt describes).
  virtual void backward(const kernels::Backend& be, const TokenBatch& batch, ParamView params,
                        const float* x, const float* saved, float* grad, float* grads,
                        float* scratch) const = 0;
};

class Gpt {
 public:
  explicit Gpt(const GptShape& shape);

  const GptShape& shape() const { return shape_; }
  const std::vector<std::unique_ptr<GptBlock>>& blocks() const { return blocks_; }
  int64_t param_count() const { return param_count_; }
  int64_t grad_count() const { return grad_offsets_.back(); }
  // Where block b's values start in the parameter and gradient buffers (b == blocks().size():
  // the end). Blocks [a, b) cover [grad_offset(a), grad_offset(b)) of the gradient buffer.
  int64_t param_offset(size_t b) const { return param_offsets_[b]; }
  int64_t grad_offset(size_t b) const { return grad_offsets_[b]; }

  // params[param_count()] at initialization for `seed` (host memory).
  void init(uint64_t seed, float* params) const;
  // Adds the head's share of wte's gradient into wte's region (nothing when untied).
  void reduce_tied(const kernels::Backend& be, float* grads) const;

 private:
  GptShape shape_;
  std::vector<std::unique_ptr<GptBlock>> blocks_;
  std::vector<int64_t> param_offsets_, grad_offsets_;
  int64_t param_count_ = 0;
};

// The activations of one micro-batch of B sequences through the blocks [first, last) of a model:
// the input of the first block, every block's output and saved values, in one buffer in the
// backend's memory (so that a pipeline stage can lend it to another whole). A pipeline stage
// keeps one per micro-batch in flight; the unpipelined engine one over all blocks.
class GptActivations {
 public:
  GptActivations(std::shared_ptr<const kernels::Backend> be, const Gpt& model, size_t first,
                 size_t last, int B);

  int sequences() const { return B_; }
  // The whole buffer: input, outputs, saved values.
  std::span<float> storage() { return {storage_.data(), static_cast<size_t>(storage_.size())}; }
  // [B, T, C]: what enters block `first` (the embedding reads tokens instead).
  float* input() { return storage_.data(); }
  // What block last - 1 produced: [B, T, C], or the head's losses [B, T].
  const float* output() const { return storage_.data() + offsets_[2 * (last_ - first_) - 1]; }
  // The head's logits [B T, V] after a forward (only when `last` is the end of the model).
  const float* logits() const;

  void forward(const TokenBatch& batch, ParamView params);
  // grad[B, T, C]: dL/d(output) on entry (nothing when the head is included), dL/d(input) on
  // return. Writes the gradient regions of blocks [first, last) of `grads`.
  // scratch[scratch_size(model, first, last, B)].
  void backward(const TokenBatch& batch, ParamView params, float* grad, float* grads,
                float* scratch) const;

  // Floats of storage() and of the backward's scratch, for blocks [first, last) and B sequences.
  static int64_t storage_size(const Gpt& model, size_t first, size_t last, int B);
  static int64_t scratch_size(const Gpt& model, size_t first, size_t last, int B);

 private:
  std::shared_ptr<const kernels::Backend> be_;
  const Gpt* model_;
  size_t first_, last_;
  int B_;
  kernels::Buffer<float> storage_;
  // Where things start in storage_: the input at 0, block first + i's output at
  // offsets_[2 i + 1] and its saved values at offsets_[2 i + 2]; the total last.
  std::vector<int64_t> offsets_;
  int64_t input_offset(size_t i) const { return i == 0 ? 0 : offsets_[2 * i - 1]; }
  static std::vector<int64_t> layout(const Gpt& model, size_t first, size_t last, int B);
};

}  // namespace hippo::worker
