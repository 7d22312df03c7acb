#include "worker/engine/gpt.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/rng.h"

namespace hippo::worker {
namespace {

using kernels::Backend;

constexpr float kInitStd = 0.02f;

// A normal(0, 1) value from one 64-bit draw at parameter index i (Box-Muller on two 24-bit
// uniforms; u1 in (0, 1] so that its log is finite).
float normal_at(uint64_t seed, int64_t i) {
  const uint64_t bits = random_u64(seed, RngPurpose::kInit, 0, static_cast<uint64_t>(i));
  const double u1 = static_cast<double>((bits >> 40) + 1) * 0x1.0p-24;
  const double u2 = static_cast<double>((bits >> 16) & 0xffffff) * 0x1.0p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

// y[N, out] = x[N, in] w[out, in]^T + b[out]  (b may be null).
void linear_forward(const Backend& be, int64_t N, int in, int out, const float* x, const float* w,
                    const float* b, float* y) {
  be.gemm(false, true, static_cast<int>(N), out, in, 1.0f, x, w, 0.0f, y);
  if (b) be.bias_forward(y, b, N, out, 1);
}

// From dy[N, out]: dw[out, in] = dy^T x and db[out] (overwritten; db may be null), and
// dx[N, in] = dy w (overwritten).
void linear_backward(const Backend& be, int64_t N, int in, int out, const float* x, const float* w,
                     const float* dy, float* dx, float* dw, float* db) {
  be.gemm(true, false, out, in, static_cast<int>(N), 1.0f, dy, x, 0.0f, dw);
  if (db) be.bias_backward(dy, db, N, out, 1);
  be.gemm(false, false, static_cast<int>(N), in, out, 1.0f, dy, w, 0.0f, dx);
}

class Embedding final : public GptBlock {
 public:
  Embedding(const GptShape& s, int64_t offset) : s_(s), offset_(offset) {}
  const char* kind() const override { return "embedding"; }
  int64_t param_count() const override { return int64_t{s_.vocab + s_.context} * s_.dim; }
  double cost() const override { return s_.dim; }
  int64_t out_size(int B) const override { return int64_t{B} * s_.context * s_.dim; }
  int64_t saved_size(int) const override { return 0; }
  int64_t scratch_size(int) const override { return 0; }

  void forward(const Backend& be, const TokenBatch& batch, ParamView params, const float*, float* y,
               float*) const override {
    const float* wte = params.at + offset_;
    be.embedding_forward(batch.inputs, wte, wte + int64_t{s_.vocab} * s_.dim, y, batch.sequences,
                         s_.context, s_.dim, s_.vocab);
  }
  void backward(const Backend& be, const TokenBatch& batch, ParamView, const float*, const float*,
                float* grad, float* grads, float*) const override {
    float* dwte = grads + offset_;
    be.embedding_backward(batch.inputs, grad, dwte, dwte + int64_t{s_.vocab} * s_.dim,
                          batch.sequences, s_.context, s_.dim, s_.vocab);
  }

 private:
  GptShape s_;
  int64_t offset_;
};

// One pre-norm transformer block. Parameters, in order (C = dim):
//   ln1 w[C], b[C]; qkv w[3C, C], b[3C]; proj w[C, C], b[C]; ln2 w[C], b[C];
//   fc w[4C, C], b[4C]; fcproj w[C, 4C], b[C].
// Saved (N = B T): ln1[N, C], mean1[N], rstd1[N], qkv[N, 3C], att[B, NH, T, T], atty[N, C],
// x2[N, C], ln2[N, C], mean2[N], rstd2[N], fch[N, 4C], fchg[N, 4C] (the GELU of fch).
// Scratch: dsmall[N, C], dbig[N, 4C] (also dqkv), datt[B, NH, T, T].
class Transformer final : public GptBlock {
 public:
  Transformer(const GptShape& s, int64_t offset) : s_(s), offset_(offset) {}
  const char* kind() const override { return "transformer"; }
  int64_t param_count() const override {
    const int64_t C = s_.dim;
    return 12 * C * C + 13 * C;
  }
  // The four products, and attention's two [T, T] x hs per head at half density (causal).
  double cost() const override {
    const double C = s_.dim;
    return 12 * C * C + static_cast<double>(s_.context) * C;
  }
  int64_t out_size(int B) const override { return N(B) * s_.dim; }
  int64_t saved_size(int B) const override { return N(B) * (15 * s_.dim + 4) + att_size(B); }
  int64_t scratch_size(int B) const override { return N(B) * 5 * s_.dim + att_size(B); }

  void forward(const Backend& be, const TokenBatch& batch, ParamView params, const float* x,
               float* y, float* saved) const override {
    const int B = batch.sequences, T = s_.context, C = s_.dim;
    const int64_t n = N(B);
    const Params p = params_at(params.at);
    const Saved sv = saved_at(saved, B);
    be.layernorm_forward(x, p.ln1w, p.ln1b, sv.ln1, sv.mean1, sv.rstd1, n, C);
    linear_forward(be, n, C, 3 * C, sv.ln1, p.qkvw, p.qkvb, sv.qkv);
    be.attention_forward(sv.qkv, sv.atty, sv.att, B, T, C, s_.heads);
    linear_forward(be, n, C, C, sv.atty, p.projw, p.projb, y);
    be.add(x, y, sv.x2, n * C);
    be.layernorm_forward(sv.x2, p.ln2w, p.ln2b, sv.ln2, sv.mean2, sv.rstd2, n, C);
    linear_forward(be, n, C, 4 * C, sv.ln2, p.fcw, p.fcb, sv.fch);
    be.gelu_forward(sv.fch, sv.fchg, n * 4 * C);
    linear_forward(be, n, 4 * C, C, sv.fchg, p.fcprojw, p.fcprojb, y);
    be.add(sv.x2, y, y, n * C);
  }

  // grad holds dL/dy: it is also dL/d(x2) around the MLP branch and dL/dx around the attention
  // branch, and each layer norm's backward adds its branch's share into it.
  void backward(const Backend& be, const TokenBatch& batch, ParamView params, const float* x,
                const float* saved, float* grad, float* grads, float* scratch) const override {
    const int B = batch.sequences, T = s_.context, C = s_.dim;
    const int64_t n = N(B);
    const Params p = params_at(params.at);
    const Params g = params_at(grads);
    const Saved sv = saved_at(const_cast<float*>(saved), B);  // read only here
    float* dsmall = scratch;                                  // [N, C]
    float* dbig = dsmall + n * C;                             // [N, 4C]
    float* datt = dbig + n * 4 * C;                           // [B, NH, T, T]
    // MLP branch.
    linear_backward(be, n, 4 * C, C, sv.fchg, p.fcprojw, grad, dbig, g.fcprojw, g.fcprojb);
    be.gelu_backward(sv.fch, dbig, dbig, n * 4 * C);
    linear_backward(be, n, C, 4 * C, sv.ln2, p.fcw, dbig, dsmall, g.fcw, g.fcb);
    be.layernorm_backward(dsmall, sv.x2, p.ln2w, sv.mean2, sv.rstd2, grad, g.ln2w, g.ln2b, n, C);
    // Attention branch.
    linear_backward(be, n, C, C, sv.atty, p.projw, grad, dsmall, g.projw, g.projb);
    be.attention_backward(dsmall, sv.qkv, sv.att, datt, dbig, B, T, C, s_.heads);
    linear_backward(be, n, C, 3 * C, sv.ln1, p.qkvw, dbig, dsmall, g.qkvw, g.qkvb);
    be.layernorm_backward(dsmall, x, p.ln1w, sv.mean1, sv.rstd1, grad, g.ln1w, g.ln1b, n, C);
  }

 private:
  struct Params {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };
  struct Saved {
    float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *x2, *ln2, *mean2, *rstd2, *fch, *fchg;
  };

  int64_t N(int B) const { return int64_t{B} * s_.context; }
  int64_t att_size(int B) const { return int64_t{B} * s_.heads * s_.context * s_.context; }

  Params params_at(const float* base) const {
    const int64_t C = s_.dim;
    float* at = const_cast<float*>(base) + offset_;
    auto take = [&](int64_t n) { return std::exchange(at, at + n); };
    Params p;
    p.ln1w = take(C), p.ln1b = take(C);
    p.qkvw = take(3 * C * C), p.qkvb = take(3 * C);
    p.projw = take(C * C), p.projb = take(C);
    p.ln2w = take(C), p.ln2b = take(C);
    p.fcw = take(4 * C * C), p.fcb = take(4 * C);
    p.fcprojw = take(4 * C * C), p.fcprojb = take(C);
    return p;
  }
  Saved saved_at(float* at, int B) const {
    const int64_t C = s_.dim, n = N(B);
    auto take = [&](int64_t count) { return std::exchange(at, at + count); };
    Saved sv;
    sv.ln1 = take(n * C), sv.mean1 = take(n), sv.rstd1 = take(n);
    sv.qkv = take(n * 3 * C), sv.att = take(att_size(B)), sv.atty = take(n * C);
    sv.x2 = take(n * C), sv.ln2 = take(n * C), sv.mean2 = take(n), sv.rstd2 = take(n);
    sv.fch = take(n * 4 * C), sv.fchg = take(n * 4 * C);
    return sv;
  }

  GptShape s_;
  int64_t offset_;
};

// Final layer norm, output layer and the loss. Parameters: lnf w[C], b[C], then (untied) W[V, C].
// Gradient region: dlnf w, b, then dW[V, C] (when tied, wte's share, which reduce_tied adds in).
// Saved (N = B T): lnf[N, C], mean[N], rstd[N], logits[N, V], dlogits[N, V] (block by block when
// the softmax is blocked). Scratch: dlnf[N, C], then, with more than one vocabulary block, each
// block's part of it [blocks, N, C].
class Head final : public GptBlock {
 public:
  Head(const GptShape& s, int64_t offset) : s_(s), offset_(offset) {}
  const char* kind() const override { return "head"; }
  int64_t param_count() const override {
    return 2 * int64_t{s_.dim} + (s_.tied ? 0 : int64_t{s_.vocab} * s_.dim);
  }
  int64_t grad_count() const override { return 2 * int64_t{s_.dim} + int64_t{s_.vocab} * s_.dim; }
  double cost() const override { return static_cast<double>(s_.vocab) * s_.dim; }
  int64_t out_size(int B) const override { return N(B); }
  int64_t saved_size(int B) const override { return N(B) * (s_.dim + 2 + 2 * int64_t{s_.vocab}); }
  int64_t scratch_size(int B) const override {
    const int blocks = vocab_blocks(s_.vocab);
    return N(B) * s_.dim * (blocks > 1 ? 1 + blocks : 1);
  }

  void forward(const Backend& be, const TokenBatch& batch, ParamView params, const float* x,
               float* y, float* saved) const override {
    const int C = s_.dim, V = s_.vocab;
    const int64_t n = N(batch.sequences);
    const float* lnfw = params.at + offset_;
    float *lnf = saved, *mean = lnf + n * C, *rstd = mean + n, *logits = rstd + n,
          *dlogits = logits + n * V;
    be.layernorm_forward(x, lnfw, lnfw + C, lnf, mean, rstd, n, C);
    linear_forward(be, n, C, V, lnf, weight(params), nullptr, logits);
    float* into = batch.grad_scale != 0 ? dlogits : nullptr;
    if (!blocked(be, saved)) {
      be.softmax_cross_entropy(logits, batch.targets, static_cast<int>(n), V, y, into,
                               batch.grad_scale);
      return;
    }
    const int blocks = vocab_blocks(V);
    std::vector<float> stats(static_cast<size_t>(blocks) * n * 2);
    vocab_block_stats(logits, n, V, V, 0, blocks, stats.data());
    vocab_softmax(logits, n, V, V, 0, blocks, stats.data(), batch.targets, y, into,
                  batch.grad_scale);
  }

  void backward(const Backend& be, const TokenBatch& batch, ParamView params, const float* x,
                const float* saved, float* grad, float* grads, float* scratch) const override {
    const int C = s_.dim, V = s_.vocab;
    const int64_t n = N(batch.sequences);
    const float *lnfw = params.at + offset_, *lnf = saved, *mean = lnf + n * C, *rstd = mean + n,
                *dlogits = rstd + n + n * V;
    float* g = grads + offset_;  // dlnf w, b, then dW
    if (blocked(be, scratch)) {
      const int blocks = vocab_blocks(V);
      float* parts = scratch + n * C;
      vocab_output_backward(be, n, C, V, 0, blocks, dlogits, lnf, weight(params), g + 2 * C, parts);
      std::vector<const float*> part(blocks);
      for (int k = 0; k < blocks; ++k) part[k] = parts + k * n * C;
      sum_vocab_parts(be, part, n, C, scratch);
    } else {
      linear_backward(be, n, C, V, lnf, weight(params), dlogits, scratch, g + 2 * C, nullptr);
    }
    be.fill_zero(grad, n * C * int64_t{sizeof(float)});  // the head starts the gradient
    be.layernorm_backward(scratch, x, lnfw, mean, rstd, grad, g, g + C, n, C);
  }

  const float* logits(const float* saved, int B) const { return saved + N(B) * (s_.dim + 2); }

 private:
  int64_t N(int B) const { return int64_t{B} * s_.context; }
  // The softmax in vocabulary blocks (gpt.h): more than one, and the backend's memory on the host.
  bool blocked(const Backend& be, float* memory) const {
    return vocab_blocks(s_.vocab) > 1 && be.host_address(memory) != nullptr;
  }
  const float* weight(ParamView params) const {
    return s_.tied ? params.wte : params.at + offset_ + 2 * int64_t{s_.dim};
  }

  GptShape s_;
  int64_t offset_;
};

}  // namespace

void vocab_block_stats(const float* logits, int64_t rows, int ld, int vocab, int first, int last,
                       float* stats) {
  for (int k = first; k < last; ++k) {
    const int size = std::min(kVocabBlock, vocab - k * kVocabBlock);
    float* st = stats + int64_t{k - first} * rows * 2;
    for (int64_t r = 0; r < rows; ++r) {
      const float* z = logits + r * ld + int64_t{k - first} * kVocabBlock;
      const float m = *std::max_element(z, z + size);
      float sum = 0;
      for (int j = 0; j < size; ++j) sum += std::exp(z[j] - m);
      st[2 * r] = m;
      st[2 * r + 1] = sum;
    }
  }
}

void vocab_softmax(const float* logits, int64_t rows, int ld, int vocab, int first, int last,
                   const float* stats, const int32_t* targets, float* losses, float* dlogits,
                   float grad_scale) {
  const int blocks = vocab_blocks(vocab);
  const int lo = first * kVocabBlock, hi = std::min(vocab, last * kVocabBlock);
  for (int64_t r = 0; r < rows; ++r) {
    float top = stats[2 * r];
    for (int k = 1; k < blocks; ++k) top = std::max(top, stats[(k * rows + r) * 2]);
    float total = 0;
    for (int k = 0; k < blocks; ++k)
      total += stats[(k * rows + r) * 2 + 1] * std::exp(stats[(k * rows + r) * 2] - top);
    const int target = targets[r];
    const float* z = logits + r * ld;  // token lo + j at z[j]
    if (losses && target >= lo && target < hi) losses[r] = std::log(total) - (z[target - lo] - top);
    if (!dlogits) continue;
    for (int k = first; k < last; ++k) {
      const int start = k * kVocabBlock, size = std::min(kVocabBlock, vocab - start);
      float* d = dlogits + int64_t{k - first} * rows * kVocabBlock + r * size;
      const float* zk = z + (start - lo);
      for (int j = 0; j < size; ++j) d[j] = grad_scale * (std::exp(zk[j] - top) / total);
      if (target >= start && target < start + size) d[target - start] -= grad_scale;
    }
  }
}

void vocab_output_backward(const kernels::Backend& be, int64_t rows, int C, int vocab, int first,
                           int last, const float* dlogits, const float* x, const float* w,
                           float* dw, float* parts) {
  const int n = static_cast<int>(rows);
  for (int k = first; k < last; ++k) {
    const int size = std::min(kVocabBlock, vocab - k * kVocabBlock);
    const float* d = dlogits + int64_t{k - first} * rows * kVocabBlock;
    const int64_t row0 = int64_t{k - first} * kVocabBlock * C;  // the block's first row of W
    be.gemm(true, false, size, C, n, 1.0f, d, x, 0.0f, dw + row0);
    be.gemm(false, false, n, C, size, 1.0f, d, w + row0, 0.0f, parts + (k - first) * rows * C);
  }
}

void sum_vocab_parts(const kernels::Backend& be, const std::vector<const float*>& parts,
                     int64_t rows, int C, float* dx) {
  const int64_t n = rows * C;
  be.add(parts[0], parts[1], dx, n);
  for (size_t k = 2; k < parts.size(); ++k) be.add(dx, parts[k], dx, n);
}

namespace {

int field(const nlohmann::json& spec, const char* name, int lo, int hi) {
  const std::string path = std::string("model.") + name;
  if (!spec.contains(name)) throw std::invalid_argument(path + ": missing");
  const nlohmann::json& v = spec[name];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw std::invalid_argument(path + ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + v.dump());
  return v.get<int>();
}

}  // namespace

GptShape GptShape::parse(const nlohmann::json& spec) {
  if (!spec.is_object() || spec.value("type", "") != "gpt")
    throw std::invalid_argument("model.type: expected \"gpt\"");
  for (const auto& [key, value] : spec.items())
    if (key != "type" && key != "layers" && key != "heads" && key != "dim" && key != "context" &&
        key != "vocab" && key != "tied")
      throw std::invalid_argument("model." + key +
                                  ": unknown field (gpt takes layers, heads, dim, context, vocab, "
                                  "tied)");
  GptShape s;
  s.layers = field(spec, "layers", 1, 1024);
  s.heads = field(spec, "heads", 1, 1024);
  s.dim = field(spec, "dim", 1, 65536);
  s.context = field(spec, "context", 1, 4096);
  s.vocab = field(spec, "vocab", 1, 1 << 20);
  if (s.dim % s.heads != 0)
    throw std::invalid_argument("model.heads: " + std::to_string(s.heads) +
                                " heads do not divide dim " + std::to_string(s.dim));
  if (spec.contains("tied")) {
    if (!spec["tied"].is_boolean())
      throw std::invalid_argument("model.tied: expected true or false, got " + spec["tied"].dump());
    s.tied = spec["tied"].get<bool>();
  }
  return s;
}

Gpt::Gpt(const GptShape& shape) : shape_(shape) {
  param_offsets_ = {0};
  auto add = [&](std::unique_ptr<GptBlock> block) {
    param_offsets_.push_back(param_offsets_.back() + block->param_count());
    blocks_.push_back(std::move(block));
  };
  add(std::make_unique<Embedding>(shape, 0));
  for (int l = 0; l < shape.layers; ++l)
    add(std::make_unique<Transformer>(shape, param_offsets_.back()));
  add(std::make_unique<Head>(shape, param_offsets_.back()));
  param_count_ = param_offsets_.back();
  // The gradient layout is the parameters', plus the head's tied share at the very end.
  grad_offsets_ = param_offsets_;
  grad_offsets_.back() += blocks_.back()->grad_count() - blocks_.back()->param_count();
}

void Gpt::init(uint64_t seed, float* params) const {
  const int64_t C = shape_.dim;
  const float proj_std = kInitStd / std::sqrt(2.0f * static_cast<float>(shape_.layers));
  auto normal = [&](int64_t begin, int64_t count, float std) {
    for (int64_t i = begin; i < begin + count; ++i) params[i] = std * normal_at(seed, i);
  };
  auto constant = [&](int64_t begin, int64_t count, float value) {
    std::fill(params + begin, params + begin + count, value);
  };
  normal(0, blocks_[0]->param_count(), kInitStd);  // wte, wpe
  for (size_t b = 1; b + 1 < blocks_.size(); ++b) {
    int64_t at = param_offsets_[b];
    // ln1, qkv, proj, ln2, fc, fcproj: (weights, biases) with the layouts of Transformer.
    const struct {
      int64_t weights, biases;
      float std;  // 0: a layer norm (weights 1)
    } parts[] = {{C, C, 0}, {3 * C * C, 3 * C, kInitStd}, {C * C, C, proj_std},
                 {C, C, 0}, {4 * C * C, 4 * C, kInitStd}, {4 * C * C, C, proj_std}};
    for (const auto& part : parts) {
      if (part.std == 0)
        constant(at, part.weights, 1.0f);
      else
        normal(at, part.weights, part.std);
      constant(at + part.weights, part.biases, 0.0f);
      at += part.weights + part.biases;
    }
  }
  const int64_t head = param_offsets_[blocks_.size() - 1];
  constant(head, C, 1.0f);
  constant(head + C, C, 0.0f);
  if (!shape_.tied) normal(head + 2 * C, int64_t{shape_.vocab} * C, kInitStd);
}

void Gpt::reduce_tied(const kernels::Backend& be, float* grads) const {
  if (!shape_.tied) return;
  const int64_t tied_share = grad_offsets_[blocks_.size() - 1] + 2 * int64_t{shape_.dim};
  be.add(grads, grads + tied_share, grads, int64_t{shape_.vocab} * shape_.dim);
}

std::vector<int64_t> GptActivations::layout(const Gpt& model, size_t first, size_t last, int B) {
  if (first >= last || last > model.blocks().size())
    throw std::invalid_argument("GptActivations: blocks [" + std::to_string(first) + ", " +
                                std::to_string(last) + ") of " +
                                std::to_string(model.blocks().size()));
  const GptShape& s = model.shape();
  // The embedding's input is its tokens: no room for it.
  std::vector<int64_t> offsets = {0, first == 0 ? 0 : int64_t{B} * s.context * s.dim};
  for (size_t b = first; b < last; ++b) {
    offsets.push_back(offsets.back() + model.blocks()[b]->out_size(B));
    offsets.push_back(offsets.back() + model.blocks()[b]->saved_size(B));
  }
  return offsets;  // the last entry is the total
}

GptActivations::GptActivations(std::shared_ptr<const kernels::Backend> be, const Gpt& model,
                               size_t first, size_t last, int B)
    : be_(std::move(be)),
      model_(&model),
      first_(first),
      last_(last),
      B_(B),
      offsets_(layout(model, first, last, B)) {
  storage_ = kernels::Buffer<float>(be_, offsets_.back());
}

const float* GptActivations::logits() const {
  if (last_ != model_->blocks().size())
    throw std::logic_error("GptActivations::logits: the head is not in these blocks");
  const auto& head = static_cast<const Head&>(*model_->blocks().back());
  return head.logits(storage_.data() + offsets_[2 * (last_ - first_)], B_);
}

void GptActivations::forward(const TokenBatch& batch, ParamView params) {
  const auto& blocks = model_->blocks();
  float* at = storage_.data();
  for (size_t i = 0; i < last_ - first_; ++i)
    blocks[first_ + i]->forward(*be_, batch, params, at + input_offset(i), at + offsets_[2 * i + 1],
                                at + offsets_[2 * i + 2]);
}

void GptActivations::backward(const TokenBatch& batch, ParamView params, float* grad, float* grads,
                              float* scratch) const {
  const auto& blocks = model_->blocks();
  const float* at = storage_.data();
  for (size_t i = last_ - first_; i-- > 0;)
    blocks[first_ + i]->backward(*be_, batch, params, at + input_offset(i),
                                 at + offsets_[2 * i + 2], grad, grads, scratch);
}

int64_t GptActivations::storage_size(const Gpt& model, size_t first, size_t last, int B) {
  return layout(model, first, last, B).back();
}

int64_t GptActivations::scratch_size(const Gpt& model, size_t first, size_t last, int B) {
  int64_t size = 0;
  for (size_t b = first; b < last; ++b) size = std::max(size, model.blocks()[b]->scratch_size(B));
  return size;
}

}  // namespace hippo::worker
