// The interpreter on real threads with the queue transport. A toy model does real arithmetic:
// pipeline position q holds a 3x3 matrix W_q, y = x + tanh(W_q x) (residual, so that deep
// pipelines still learn), the loss is 0.5*|y - target|^2 at
// the last position. Every schedule must give the same weights, bit for bit, as a sequential
// run over the same micro-batches (backwards of each position in ascending micro-batch order).
#include "pipeline/interpreter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>

#include "pipeline/queue_transport.h"
#include "pipeline/schedules.h"
#include "pipeline/simulator.h"

namespace hippo::pipeline {
namespace {

constexpr int kDim = 3;
constexpr float kLearningRate = 0.1f;

float input(int step, int mb, int i) {
  return std::sin(1.0f + 7 * step + kDim * mb + i);
}
float target(int mb, int i) {
  return 0.5f * std::cos(float(mb + i));
}

std::vector<float> initial_weights(int q) {
  std::vector<float> w(kDim * kDim);
  for (int i = 0; i < kDim * kDim; ++i) w[i] = 0.5f * std::sin(3.0f * q + i);
  return w;
}

// t[kDim] = tanh(W[kDim, kDim] x[kDim]), y[kDim] = x + t
void layer_forward(const float* w, const float* x, float* t, float* y) {
  for (int r = 0; r < kDim; ++r) {
    float sum = 0;
    for (int c = 0; c < kDim; ++c) sum += w[r * kDim + c] * x[c];
    t[r] = std::tanh(sum);
    y[r] = x[r] + t[r];
  }
}

// From the stash (x, t) and dy: dW += outer(g, x) with g = dy * (1 - t^2); dx = dy + W^T g.
void layer_backward(const float* w, const float* x, const float* t, const float* dy, float* dw,
                    float* dx) {
  float g[kDim];
  for (int r = 0; r < kDim; ++r) g[r] = dy[r] * (1 - t[r] * t[r]);
  for (int r = 0; r < kDim; ++r)
    for (int c = 0; c < kDim; ++c) dw[r * kDim + c] += g[r] * x[c];
  for (int c = 0; c < kDim; ++c) {
    float sum = 0;
    for (int r = 0; r < kDim; ++r) sum += w[r * kDim + c] * g[r];
    dx[c] = dy[c] + sum;
  }
}

void sgd(std::vector<float>& w, std::vector<float>& dw) {
  for (size_t i = 0; i < w.size(); ++i) w[i] -= kLearningRate * dw[i];
  std::fill(dw.begin(), dw.end(), 0.0f);
}

// All positions on one thread, micro-batches in order.
std::vector<std::vector<float>> train_sequentially(int positions, int microbatches, int steps) {
  std::vector<std::vector<float>> w, dw(positions, std::vector<float>(kDim * kDim, 0));
  for (int q = 0; q < positions; ++q) w.push_back(initial_weights(q));
  for (int step = 0; step < steps; ++step) {
    for (int mb = 0; mb < microbatches; ++mb) {
      std::vector<std::vector<float>> act(positions + 1, std::vector<float>(kDim));
      std::vector<std::vector<float>> t(positions, std::vector<float>(kDim));
      for (int i = 0; i < kDim; ++i) act[0][i] = input(step, mb, i);
      for (int q = 0; q < positions; ++q)
        layer_forward(w[q].data(), act[q].data(), t[q].data(), act[q + 1].data());
      std::vector<float> grad(kDim), dx(kDim);
      for (int i = 0; i < kDim; ++i) grad[i] = act[positions][i] - target(mb, i);
      for (int q = positions - 1; q >= 0; --q) {
        layer_backward(w[q].data(), act[q].data(), t[q].data(), grad.data(), dw[q].data(),
                       dx.data());
        grad = dx;
      }
    }
    for (int q = 0; q < positions; ++q) sgd(w[q], dw[q]);
  }
  return w;
}

// One stage of the toy model: the chunks of one device.
class ToyStage : public StageExecutor {
 public:
  ToyStage(int stages, int chunks, int device) : p_(stages), v_(chunks), device_(device) {
    for (int c = 0; c < v_; ++c) {
      w_.push_back(initial_weights(c * p_ + device_));
      dw_.emplace_back(kDim * kDim, 0.0f);
    }
  }
  int step = 0;  // which optimizer step: picks the input data
  // Position 0 reads its input and the last position its output's gradient from the buffers
  // (the vocabulary passes fill them) instead of the toy's data and loss.
  bool vocab_ends = false;

  void forward(int mb, int chunk) override {
    const int q = chunk * p_ + device_;
    std::vector<float> x(kDim);
    if (q == 0 && !vocab_ends) {
      for (int i = 0; i < kDim; ++i) x[i] = input(step, mb, i);
    } else {
      x = existing(Buffer::kActivationIn, mb, chunk);
      buffers_.erase({Buffer::kActivationIn, mb, chunk});
    }
    std::vector<float>& stash = buffer_of(Buffer::kStash, mb, chunk);  // (x, t)
    std::copy(x.begin(), x.end(), stash.begin());
    layer_forward(w_[chunk].data(), x.data(), stash.data() + kDim,
                  buffer_of(Buffer::kActivationOut, mb, chunk).data());
  }

  void backward(int mb, int chunk) override {
    const int q = chunk * p_ + device_;
    const std::vector<float> stash = existing(Buffer::kStash, mb, chunk);
    std::vector<float> dy(kDim);
    if (q == p_ * v_ - 1 && !vocab_ends) {
      const std::vector<float>& y = existing(Buffer::kActivationOut, mb, chunk);
      for (int i = 0; i < kDim; ++i) dy[i] = y[i] - target(mb, i);
    } else {
      dy = existing(Buffer::kGradientIn, mb, chunk);
    }
    layer_backward(w_[chunk].data(), stash.data(), stash.data() + kDim, dy.data(),
                   dw_[chunk].data(), buffer_of(Buffer::kGradientOut, mb, chunk).data());
    for (Buffer b : {Buffer::kStash, Buffer::kGradientIn, Buffer::kActivationOut})
      buffers_.erase({b, mb, chunk});
  }

  void optimizer_step() override {
    for (int c = 0; c < v_; ++c) sgd(w_[c], dw_[c]);
    ++step;
  }

  std::span<float> buffer(Buffer which, int mb, int chunk) override {
    return buffer_of(which, mb, chunk);
  }
  void release(Buffer which, int mb, int chunk) override {
    if (buffers_.erase({which, mb, chunk}) != 1) throw std::logic_error("release of no buffer");
  }

  const std::vector<float>& weights(int chunk) const { return w_[chunk]; }
  size_t live_buffers() const { return buffers_.size() - gradients_out(); }

 private:
  using Key = std::tuple<Buffer, int, int>;
  std::vector<float>& buffer_of(Buffer which, int mb, int chunk) {
    const size_t size = which == Buffer::kStash || which == Buffer::kLoan ? 2 * kDim : kDim;
    std::vector<float>& b = buffers_[{which, mb, chunk}];
    b.resize(size);
    return b;
  }
  // A buffer that must be there: an evicted stash that was not reloaded is an error.
  const std::vector<float>& existing(Buffer which, int mb, int chunk) const {
    auto it = buffers_.find({which, mb, chunk});
    if (it == buffers_.end()) throw std::logic_error("missing buffer of mb " + std::to_string(mb));
    return it->second;
  }
  size_t gradients_out() const {
    size_t n = 0;
    for (const auto& [key, b] : buffers_) n += std::get<0>(key) == Buffer::kGradientOut;
    return n;
  }
  int p_, v_, device_;
  std::vector<std::vector<float>> w_, dw_;  // [chunks][kDim * kDim]
  std::map<Key, std::vector<float>> buffers_;
};

void expect_pipelined_equals_sequential(const PipelineShape& shape, int steps) {
  SCOPED_TRACE(std::string(schedule_name(shape.schedule)) + " p=" + std::to_string(shape.stages) +
               " m=" + std::to_string(shape.microbatches) + " v=" + std::to_string(shape.chunks));
  Program program = generate(shape);
  std::vector<ToyStage> stages;
  for (int s = 0; s < shape.stages; ++s) stages.emplace_back(shape.stages, shape.chunks, s);
  std::vector<StageExecutor*> executors;
  for (ToyStage& stage : stages) executors.push_back(&stage);
  QueueTransport transport;
  for (int step = 0; step < steps; ++step) run_program(program, executors, transport);
  EXPECT_EQ(transport.pending(), 0u);
  auto expected = train_sequentially(shape.stages * shape.chunks, shape.microbatches, steps);
  for (int s = 0; s < shape.stages; ++s) {
    EXPECT_EQ(stages[s].live_buffers(), 0u) << "stage " << s << " kept stashes or loans";
    for (int c = 0; c < shape.chunks; ++c) {
      const std::vector<float>& got = stages[s].weights(c);
      const std::vector<float>& want = expected[c * shape.stages + s];
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << "position " << c * shape.stages + s << ": " << got[0] << " vs " << want[0];
      EXPECT_NE(got, initial_weights(c * shape.stages + s));  // it did train
    }
  }
}

TEST(Interpreter, EverySchedulesGivesTheSequentialWeightsBitForBit) {
  for (Schedule schedule : {Schedule::kGPipe, Schedule::kOneFOneB, Schedule::kBPipe}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 3, 8}) expect_pipelined_equals_sequential({p, m, schedule, 1}, 3);
    }
  }
  for (int p : {2, 3, 4}) {
    for (int v : {1, 2, 3})
      expect_pipelined_equals_sequential({p, 2 * p, Schedule::kInterleaved, v}, 3);
  }
}

// BPipe with many evictions: p = 8 lends 3 stashes per lender at m = 16.
TEST(Interpreter, BPipeEvictionsRoundTripTheStashes) {
  Program program = generate({8, 16, Schedule::kBPipe, 1});
  int evicts = 0;
  for (const auto& list : program.instructions)
    for (const Instruction& ins : list) evicts += ins.op == Op::kEvict;
  EXPECT_GT(evicts, 8);
  expect_pipelined_equals_sequential({8, 16, Schedule::kBPipe, 1}, 2);
  expect_pipelined_equals_sequential({7, 12, Schedule::kBPipe, 1}, 2);
}

// Vocabulary parallelism on the toy: a token embedding E[kVocab, kDim] before position 0, an
// output layer U[kVocab, kDim] with softmax cross-entropy after the last position, both cut into
// shards of whole vocabulary blocks (kBlock tokens), one shard per stage. The softmax reduces the
// blocks in one fixed order: block k's max m_k and sum s_k of exp(l - m_k), then over blocks in
// order total = sum s_k exp(m_k - M), M the largest m_k; the output layer's input gradient sums
// the blocks' parts in block order (the last stage, from every stage's parts). So any number of
// stages gives the sequential run's weights bit for bit.
constexpr int kVocab = 12, kBlock = 3, kBlocks = kVocab / kBlock;

int token(int step, int mb) {
  return (7 * step + 3 * mb) % kVocab;
}
int next_token(int step, int mb) {
  return (5 * token(step, mb) + 1) % kVocab;
}
std::vector<float> vocab_rows(float seed) {  // [kVocab, kDim]
  std::vector<float> rows(kVocab * kDim);
  for (int i = 0; i < kVocab * kDim; ++i) rows[i] = 0.7f * std::sin(seed + 1.3f * i);
  return rows;
}

struct VocabStats {
  float max[kBlocks], sum[kBlocks];
};

// Block k's stats of the logits of y.
void block_stats(const std::vector<float>& u, const float* y, int k, float* max, float* sum) {
  float l[kBlock];
  for (int j = 0; j < kBlock; ++j) {
    l[j] = 0;
    for (int i = 0; i < kDim; ++i) l[j] += u[(k * kBlock + j) * kDim + i] * y[i];
  }
  *max = *std::max_element(l, l + kBlock);
  *sum = 0;
  for (int j = 0; j < kBlock; ++j) *sum += std::exp(l[j] - *max);
}

// Block k's backward given every block's stats: dU rows += g y, part[kDim] = sum_j g_j U_j.
void block_backward(const std::vector<float>& u, const VocabStats& st, const float* y, int k,
                    int target, std::vector<float>& du, float* part) {
  const float top = *std::max_element(st.max, st.max + kBlocks);
  float total = 0;
  for (int b = 0; b < kBlocks; ++b) total += st.sum[b] * std::exp(st.max[b] - top);
  std::fill(part, part + kDim, 0.0f);
  for (int j = k * kBlock; j < (k + 1) * kBlock; ++j) {
    float l = 0;
    for (int i = 0; i < kDim; ++i) l += u[j * kDim + i] * y[i];
    const float g = std::exp(l - top) / total - (j == target ? 1.0f : 0.0f);
    for (int i = 0; i < kDim; ++i) {
      du[j * kDim + i] += g * y[i];
      part[i] += g * u[j * kDim + i];
    }
  }
}

// acc[kDim] += each block's part of parts[blocks * kDim], in order.
void add_parts(const std::vector<float>& parts, float* acc) {
  for (size_t k = 0; k < parts.size(); k += kDim)
    for (int i = 0; i < kDim; ++i) acc[i] += parts[k + i];
}

struct VocabModel {
  std::vector<std::vector<float>> w;  // [positions][kDim * kDim]
  std::vector<float> e, u;            // [kVocab * kDim]
};

VocabModel initial_vocab_model(int positions) {
  VocabModel model{{}, vocab_rows(0.5f), vocab_rows(2.0f)};
  for (int q = 0; q < positions; ++q) model.w.push_back(initial_weights(q));
  return model;
}

VocabModel train_vocab_sequentially(int positions, int microbatches, int steps) {
  VocabModel model = initial_vocab_model(positions);
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> dw(positions, std::vector<float>(kDim * kDim, 0));
    std::vector<float> de(kVocab * kDim, 0), du(kVocab * kDim, 0);
    for (int mb = 0; mb < microbatches; ++mb) {
      const int tok = token(step, mb);
      std::vector<std::vector<float>> act(positions + 1, std::vector<float>(kDim));
      std::vector<std::vector<float>> t(positions, std::vector<float>(kDim));
      std::copy_n(model.e.begin() + tok * kDim, kDim, act[0].begin());
      for (int q = 0; q < positions; ++q)
        layer_forward(model.w[q].data(), act[q].data(), t[q].data(), act[q + 1].data());
      VocabStats st;
      for (int k = 0; k < kBlocks; ++k)
        block_stats(model.u, act[positions].data(), k, &st.max[k], &st.sum[k]);
      std::vector<float> grad(kDim, 0), dx(kDim), parts(kBlocks * kDim);
      for (int k = 0; k < kBlocks; ++k)
        block_backward(model.u, st, act[positions].data(), k, next_token(step, mb), du,
                       parts.data() + k * kDim);
      add_parts(parts, grad.data());
      for (int q = positions - 1; q >= 0; --q) {
        layer_backward(model.w[q].data(), act[q].data(), t[q].data(), grad.data(), dw[q].data(),
                       dx.data());
        grad = dx;
      }
      for (int i = 0; i < kDim; ++i) de[tok * kDim + i] += grad[i];
    }
    for (int q = 0; q < positions; ++q) sgd(model.w[q], dw[q]);
    sgd(model.e, de);
    sgd(model.u, du);
  }
  return model;
}

// A ToyStage with the vocabulary shard of its stage: blocks [first_, last_).
class VocabStage : public ToyStage {
 public:
  VocabStage(int stages, int chunks, int device)
      : ToyStage(stages, chunks, device),
        p_(stages),
        v_(chunks),
        device_(device),
        first_(device * kBlocks / stages),
        last_((device + 1) * kBlocks / stages),
        e_(vocab_rows(0.5f)),
        u_(vocab_rows(2.0f)),
        de_(kVocab * kDim, 0),
        du_(kVocab * kDim, 0) {
    vocab_ends = true;
  }

  void forward(int mb, int chunk) override {
    if (device_ == 0 && chunk == 0) {  // the summed embedding enters position 0
      std::vector<float> x = take(Buffer::kEmbedding, mb, 0);
      for (int q = 1; q < p_; ++q) {
        const std::vector<float> part = take(Buffer::kEmbeddingIn, mb, q);
        for (int i = 0; i < kDim; ++i) x[i] += part[i];
      }
      std::copy(x.begin(), x.end(), ToyStage::buffer(Buffer::kActivationIn, mb, chunk).begin());
    }
    ToyStage::forward(mb, chunk);
    if (device_ == p_ - 1 && chunk == v_ - 1) {
      const std::span<float> y = ToyStage::buffer(Buffer::kActivationOut, mb, chunk);
      std::copy(y.begin(), y.end(), mine(Buffer::kVocabInput, mb, 0).begin());
    }
  }

  void backward(int mb, int chunk) override {
    if (device_ == p_ - 1 && chunk == v_ - 1) {  // dL/dy: every stage's parts, in block order
      std::vector<float> dy(kDim, 0.0f);
      for (int q = 0; q < p_; ++q)
        add_parts(q == device_ ? take(Buffer::kVocabGradient, mb, 0)
                               : take(Buffer::kVocabGradientIn, mb, q),
                  dy.data());
      std::copy(dy.begin(), dy.end(), ToyStage::buffer(Buffer::kGradientIn, mb, chunk).begin());
    }
    ToyStage::backward(mb, chunk);
    if (device_ == 0 && chunk == 0) {
      const std::span<float> dx = ToyStage::buffer(Buffer::kGradientOut, mb, chunk);
      std::copy(dx.begin(), dx.end(), mine(Buffer::kEmbedGradient, mb, 0).begin());
    }
  }

  void embed_forward(int mb) override {
    std::vector<float>& x = mine(Buffer::kEmbedding, mb, 0);
    const int tok = token(step, mb);
    for (int i = 0; i < kDim; ++i) x[i] = owns(tok) ? e_[tok * kDim + i] : 0.0f;
  }

  void embed_backward(int mb) override {
    const std::vector<float> g = take(Buffer::kEmbedGradient, mb, 0);
    const int tok = token(step, mb);
    if (owns(tok))
      for (int i = 0; i < kDim; ++i) de_[tok * kDim + i] += g[i];
  }

  void vocab_forward(int mb) override {
    const std::vector<float>& y = mine(Buffer::kVocabInput, mb, 0);
    std::vector<float>& stats = mine(Buffer::kVocabStats, mb, 0);
    for (int k = first_; k < last_; ++k)
      block_stats(u_, y.data(), k, &stats[2 * (k - first_)], &stats[2 * (k - first_) + 1]);
  }

  void vocab_backward(int mb) override {
    VocabStats st;
    for (int q = 0; q < p_; ++q) {
      const std::vector<float> stats =
          q == device_ ? take(Buffer::kVocabStats, mb, 0) : take(Buffer::kVocabStatsIn, mb, q);
      for (int k = q * kBlocks / p_; k < (q + 1) * kBlocks / p_; ++k) {
        st.max[k] = stats[2 * (k - q * kBlocks / p_)];
        st.sum[k] = stats[2 * (k - q * kBlocks / p_) + 1];
      }
    }
    const std::vector<float> y = take(Buffer::kVocabInput, mb, 0);
    std::vector<float>& parts = mine(Buffer::kVocabGradient, mb, 0);
    for (int k = first_; k < last_; ++k)
      block_backward(u_, st, y.data(), k, next_token(step, mb), du_,
                     parts.data() + (k - first_) * kDim);
  }

  void optimizer_step() override {
    ToyStage::optimizer_step();  // counts the step too
    sgd(e_, de_);
    sgd(u_, du_);
  }

  std::span<float> buffer(Buffer which, int mb, int chunk) override {
    if (which < Buffer::kEmbedding) return ToyStage::buffer(which, mb, chunk);
    return mine(which, mb, chunk);
  }

  // Whether a token's rows of E and U are this stage's; the vocabulary buffers not used up (but
  // those only sent: a shard's embedding, the input gradient passed on).
  bool owns(int tok) const { return tok >= first_ * kBlock && tok < last_ * kBlock; }
  const std::vector<float>& embedding() const { return e_; }
  const std::vector<float>& output() const { return u_; }
  size_t live_vocab_buffers() const {
    size_t n = 0;
    for (const auto& [key, b] : vocab_)
      n += std::get<0>(key) != Buffer::kEmbedding && std::get<0>(key) != Buffer::kVocabGradient;
    return n;
  }

 private:
  using Key = std::tuple<Buffer, int, int>;
  std::vector<float>& mine(Buffer which, int mb, int slot) {
    // A stage's stats, (max, sum) per block of its shard, and its input gradient parts, kDim per
    // block (`slot`: the stage, for those received).
    const bool in = which == Buffer::kVocabStatsIn || which == Buffer::kVocabGradientIn;
    const int stage = in ? slot : device_;
    const size_t blocks = (stage + 1) * kBlocks / p_ - stage * kBlocks / p_;
    size_t size = kDim;
    if (which == Buffer::kVocabStats || which == Buffer::kVocabStatsIn) size = 2 * blocks;
    if (which == Buffer::kVocabGradient || which == Buffer::kVocabGradientIn) size = kDim * blocks;
    std::vector<float>& b = vocab_[{which, mb, slot}];
    b.resize(size);
    return b;
  }
  std::vector<float> take(Buffer which, int mb, int slot) {
    auto it = vocab_.find({which, mb, slot});
    if (it == vocab_.end()) throw std::logic_error("missing vocabulary buffer");
    std::vector<float> b = std::move(it->second);
    vocab_.erase(it);
    return b;
  }
  int p_, v_, device_, first_, last_;
  std::vector<float> e_, u_, de_, du_;
  std::map<Key, std::vector<float>> vocab_;
};

TEST(Interpreter, VocabParallelGivesTheSequentialWeightsBitForBit) {
  struct Case {
    int p, m;
    Schedule schedule;
    int v;
  };
  for (const Case& c : {Case{2, 3, Schedule::kOneFOneB, 1}, Case{3, 5, Schedule::kOneFOneB, 1},
                        Case{4, 8, Schedule::kOneFOneB, 1}, Case{2, 4, Schedule::kInterleaved, 2},
                        Case{4, 8, Schedule::kInterleaved, 2}}) {
    SCOPED_TRACE("p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) +
                 " v=" + std::to_string(c.v));
    const Program program = generate({c.p, c.m, c.schedule, c.v, true});
    ASSERT_TRUE(simulate(program).ok());
    std::vector<std::unique_ptr<VocabStage>> stages;
    std::vector<StageExecutor*> executors;
    for (int s = 0; s < c.p; ++s) {
      stages.push_back(std::make_unique<VocabStage>(c.p, c.v, s));
      executors.push_back(stages.back().get());
    }
    QueueTransport transport;
    constexpr int kSteps = 3;
    for (int step = 0; step < kSteps; ++step) run_program(program, executors, transport);
    EXPECT_EQ(transport.pending(), 0u);
    const VocabModel want = train_vocab_sequentially(c.p * c.v, c.m, kSteps);
    for (int s = 0; s < c.p; ++s) {
      EXPECT_EQ(stages[s]->live_vocab_buffers(), 0u) << "stage " << s;
      for (int ch = 0; ch < c.v; ++ch)
        EXPECT_EQ(stages[s]->weights(ch), want.w[ch * c.p + s]) << "position " << ch * c.p + s;
      for (int tok = 0; tok < kVocab; ++tok) {
        if (!stages[s]->owns(tok)) continue;
        for (int i = 0; i < kDim; ++i) {
          EXPECT_EQ(stages[s]->embedding()[tok * kDim + i], want.e[tok * kDim + i]) << tok;
          EXPECT_EQ(stages[s]->output()[tok * kDim + i], want.u[tok * kDim + i]) << tok;
        }
      }
    }
    EXPECT_NE(want.u, vocab_rows(2.0f));  // it did train
    EXPECT_NE(want.e, vocab_rows(0.5f));
  }
}

// A stage that fails stops the whole program: the others do not wait forever.
TEST(Interpreter, AFailingStageAbortsTheOthers) {
  struct Failing : ToyStage {
    using ToyStage::ToyStage;
    void forward(int mb, int chunk) override {
      if (mb == 2) throw std::runtime_error("stage 1 ran out of memory");
      ToyStage::forward(mb, chunk);
    }
  };
  Program program = generate({3, 6, Schedule::kOneFOneB, 1});
  ToyStage first(3, 1, 0), last(3, 1, 2);
  Failing middle(3, 1, 1);
  QueueTransport transport;
  try {
    run_program(program, {&first, &middle, &last}, transport);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stage 1 ran out of memory");
  }
}

TEST(QueueTransport, RefusesAMessageOtherThanTheExpectedOne) {
  QueueTransport transport;
  std::vector<float> data(4, 1.0f);
  transport.send(0, {Op::kSendActivation, 1, 0, 1}, data);
  try {
    transport.receive(0, {Op::kSendActivation, 0, 0, 1}, data);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "stage 1 expected stage 0's send activation mb 0 to stage 1, got its send "
                 "activation mb 1 to stage 1");
  }
  transport.send(0, {Op::kSendGradient, 0, 0, 1}, data);
  std::vector<float> small(3);
  EXPECT_THROW(transport.receive(0, {Op::kSendGradient, 0, 0, 1}, small), std::runtime_error);
}

}  // namespace
}  // namespace hippo::pipeline
