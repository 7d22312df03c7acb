// The interpreter on real threads with the queue transport. A toy model does real arithmetic:
// pipeline position q holds a 3x3 matrix W_q, y = x + tanh(W_q x) (residual, so that deep
// pipelines still learn), the loss is 0.5*|y - target|^2 at
// the last position. Every schedule must give the same weights, bit for bit, as a sequential
// run over the same micro-batches (backwards of each position in ascending micro-batch order).
#include "pipeline/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
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

  void forward(int mb, int chunk) override {
    const int q = chunk * p_ + device_;
    std::vector<float> x(kDim);
    if (q == 0) {
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
    if (q == p_ * v_ - 1) {
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
