// The gpt model of gpt.h: spec errors, parameter layout and initialization, the whole model's
// gradient against finite differences (tied and untied), and the exactness that pipelining rests
// on: blocks run in two ranges, handing activations and gradients over, give the bits of one run.
#include "worker/engine/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace hippo::worker {
namespace {

using nlohmann::json;

json spec(bool tied = true) {
  return {{"type", "gpt"}, {"layers", 2}, {"heads", 2},  {"dim", 8},
          {"context", 5},  {"vocab", 11}, {"tied", tied}};
}

TEST(GptTest, SpecErrorsNameTheField) {
  auto error = [](json s) {
    try {
      GptShape::parse(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  json s = spec();
  s.erase("heads");
  EXPECT_EQ(error(s), "model.heads: missing");
  s = spec();
  s["heads"] = 3;
  EXPECT_EQ(error(s), "model.heads: 3 heads do not divide dim 8");
  s = spec();
  s["context"] = 0;
  EXPECT_EQ(error(s), "model.context: expected an integer in [1, 4096], got 0");
  s = spec();
  s["tied"] = "yes";
  EXPECT_EQ(error(s), "model.tied: expected true or false, got \"yes\"");
  s = spec();
  s["hidden"] = 3;
  EXPECT_EQ(error(s).rfind("model.hidden: unknown field", 0), 0u) << error(s);
  EXPECT_TRUE(GptShape::parse(spec()).tied);
  s = spec();
  s.erase("tied");
  EXPECT_TRUE(GptShape::parse(s).tied);  // the default
}

TEST(GptTest, ParameterLayoutAndInitialization) {
  for (bool tied : {true, false}) {
    const GptShape s = GptShape::parse(spec(tied));
    Gpt model(s);
    const int64_t C = 8, V = 11, T = 5;
    const int64_t block = 12 * C * C + 13 * C;
    ASSERT_EQ(model.blocks().size(), 4u);
    EXPECT_EQ(model.param_count(), V * C + T * C + 2 * block + 2 * C + (tied ? 0 : V * C));
    EXPECT_EQ(model.grad_count(), V * C + T * C + 2 * block + 2 * C + V * C);
    std::vector<float> p(model.param_count()), q(model.param_count());
    model.init(7, p.data());
    model.init(7, q.data());
    EXPECT_EQ(p, q);
    model.init(8, q.data());
    EXPECT_NE(p, q);
    // Embeddings normal(0, 0.02); the first block's layer norm 1, then 0; its qkv weights normal.
    double sq = 0;
    for (int64_t i = 0; i < (V + T) * C; ++i) sq += double{p[i]} * p[i];
    EXPECT_NEAR(std::sqrt(sq / double((V + T) * C)), 0.02, 0.004);
    const int64_t b1 = model.param_offset(1);
    EXPECT_EQ(p[b1], 1.0f);
    EXPECT_EQ(p[b1 + C], 0.0f);
    EXPECT_NE(p[b1 + 2 * C], 0.0f);
    EXPECT_EQ(p[model.param_offset(3)], 1.0f);  // the final layer norm's weight
  }
}

// Runs blocks [0, end) of `model` as ranges cut at `cuts` (each range hands its output and,
// backward, its input gradient to the next), on B sequences; returns the mean loss per token and
// fills grads (already reduced for the tied weight).
struct Runner {
  std::shared_ptr<const kernels::Backend> be;
  const Gpt& model;
  int B;
  std::vector<int32_t> inputs, targets;

  double loss_and_grads(const std::vector<float>& params, std::vector<float>* grads,
                        const std::vector<size_t>& cuts = {}) const {
    const GptShape& s = model.shape();
    auto p = kernels::Buffer<float>::from_host(be, params.data(), std::ssize(params));
    auto in = kernels::Buffer<int32_t>::from_host(be, inputs.data(), std::ssize(inputs));
    auto tg = kernels::Buffer<int32_t>::from_host(be, targets.data(), std::ssize(targets));
    const int64_t N = int64_t{B} * s.context;
    TokenBatch batch{B, in.data(), tg.data(), grads ? 1.0f / static_cast<float>(N) : 0.0f};
    std::vector<size_t> bounds = {0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(model.blocks().size());
    std::vector<GptActivations> ranges;
    for (size_t r = 0; r + 1 < bounds.size(); ++r)
      ranges.emplace_back(be, model, bounds[r], bounds[r + 1], B);
    for (size_t r = 0; r < ranges.size(); ++r) {
      if (r > 0) be->copy(ranges[r].input(), ranges[r - 1].output(), N * s.dim * 4);
      ranges[r].forward(batch, p.data());
    }
    std::vector<float> losses(N);
    be->copy_to_host(losses.data(), ranges.back().output(), N * 4);
    double total = 0;
    for (float l : losses) total += l;
    if (!grads) return total / N;

    kernels::Buffer<float> g(be, model.grad_count()), grad(be, N * s.dim);
    std::vector<float> nan(model.grad_count(), NAN);  // every region must be overwritten
    g.copy_from_host(nan.data());
    for (size_t r = ranges.size(); r-- > 0;) {
      kernels::Buffer<float> scratch(
          be, GptActivations::scratch_size(model, bounds[r], bounds[r + 1], B));
      ranges[r].backward(batch, p.data(), grad.data(), g.data(), scratch.data());
    }
    model.reduce_tied(*be, g.data());
    *grads = g.to_host(model.param_count());
    return total / N;
  }
};

Runner make_runner(std::shared_ptr<const kernels::Backend> be, const Gpt& model, int B) {
  Runner r{std::move(be), model, B, {}, {}};
  const GptShape& s = model.shape();
  std::mt19937 gen(3);
  std::vector<int32_t> text(B * s.context + 1);
  for (int32_t& t : text) t = static_cast<int32_t>(gen() % s.vocab);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < s.context; ++t) {
      r.inputs.push_back(text[b * s.context + t]);
      r.targets.push_back(text[b * s.context + t + 1]);
    }
  return r;
}

std::vector<float> random_params(const Gpt& model, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.4f, 0.4f);
  std::vector<float> p(model.param_count());
  for (float& x : p) x = dist(gen);
  return p;
}

// The gradient of `model` at random parameters against central differences of the loss, at
// every stride-th parameter.
void expect_gradient_matches(const Gpt& model, int64_t stride) {
  std::shared_ptr<const kernels::Backend> be = kernels::make_cpu_backend(1);
  Runner run = make_runner(be, model, 2);
  std::vector<float> params = random_params(model, 11), grads;
  run.loss_and_grads(params, &grads);
  const float e = 1e-2f;
  int checked = 0;
  for (int64_t i = 0; i < model.param_count(); i += stride, ++checked) {
    const float saved = params[i];
    params[i] = saved + e;
    const double up = run.loss_and_grads(params, nullptr);
    params[i] = saved - e;
    const double down = run.loss_and_grads(params, nullptr);
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * e);
    ASSERT_NEAR(grads[i], numeric, 2e-4 + 2e-2 * std::abs(numeric)) << "parameter " << i;
  }
  EXPECT_GT(checked, 250);
}

TEST(GptTest, GradientMatchesFiniteDifferences) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    expect_gradient_matches(Gpt(GptShape::parse(spec(tied))), 7);
  }
}

// More than one vocabulary block (gpt.h): the softmax reduced block by block (the last one
// shorter) has the whole vocabulary kernel's loss, up to rounding, and the right gradient.
TEST(GptTest, BlockedSoftmaxHasTheLossAndGradientOfTheWholeVocabulary) {
  json s = spec(true);
  s["layers"] = 1;
  s["vocab"] = 2 * kVocabBlock + 11;
  const Gpt model(GptShape::parse(s));
  ASSERT_EQ(vocab_blocks(model.shape().vocab), 3);
  std::shared_ptr<const kernels::Backend> be = kernels::make_cpu_backend(1);
  const Runner run = make_runner(be, model, 2);
  const std::vector<float> params = random_params(model, 11);
  const double blocked = run.loss_and_grads(params, nullptr);
  GptActivations acts(be, model, 0, model.blocks().size(), 2);
  acts.forward({2, run.inputs.data(), run.targets.data(), 0.0f}, params.data());
  const int n = 2 * model.shape().context;
  std::vector<float> losses(n);
  be->softmax_cross_entropy(acts.logits(), run.targets.data(), n, model.shape().vocab,
                            losses.data(), nullptr, 0.0f);
  double whole = 0;
  for (float l : losses) whole += l;
  EXPECT_NEAR(blocked, whole / n, 1e-5);
  expect_gradient_matches(model, model.param_count() / 300);
}

// What the pipelined engine relies on: the model cut into ranges of blocks, activations and
// gradients handed over between them, gives the bits of one pass over all blocks, for any thread
// count.
TEST(GptTest, RangesOfBlocksGiveTheBitsOfOnePass) {
  json s = spec(true);
  s["layers"] = 3;
  s["dim"] = 32;
  s["context"] = 16;
  s["heads"] = 4;
  s["vocab"] = 20;
  Gpt model(GptShape::parse(s));
  std::shared_ptr<const kernels::Backend> one = kernels::make_cpu_backend(1),
                                          two = kernels::make_cpu_backend(2);
  const std::vector<float> params = random_params(model, 12);
  std::vector<float> whole, cut, threads;
  const double loss = make_runner(one, model, 4).loss_and_grads(params, &whole);
  EXPECT_EQ(make_runner(one, model, 4).loss_and_grads(params, &cut, {1, 3}), loss);
  EXPECT_EQ(cut, whole);
  EXPECT_EQ(make_runner(one, model, 4).loss_and_grads(params, &cut, {2, 3, 4}), loss);
  EXPECT_EQ(cut, whole);
  EXPECT_EQ(make_runner(two, model, 4).loss_and_grads(params, &threads), loss);
  EXPECT_EQ(threads, whole);
}

}  // namespace
}  // namespace hippo::worker
