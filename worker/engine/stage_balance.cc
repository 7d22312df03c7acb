#include "worker/engine/stage_balance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/buffer.h"
#include "pipeline/schedules.h"

namespace hippo::worker {

std::vector<size_t> cut_blocks(const Gpt& model, int positions, bool vocab_parallel) {
  const size_t n = model.blocks().size();
  // With vocabulary parallelism the embedding and the head are computed by every stage: only
  // the transformer blocks are cut, the first and last ranges then take the two ends along.
  const size_t lo = vocab_parallel ? 1 : 0, hi = vocab_parallel ? n - 1 : n;
  if (positions < 1 || static_cast<size_t>(positions) > hi - lo)
    throw std::invalid_argument(
        "pipeline: " + std::to_string(positions) +
        " pipeline positions (stages x chunks) for a model of " + std::to_string(n) +
        " blocks (embedding, " + std::to_string(n - 2) + " transformer blocks, head)" +
        (vocab_parallel ? ": with vocab_parallel each position needs a transformer block" : ""));
  std::vector<double> prefix = {0};
  for (size_t b = lo; b < hi; ++b) prefix.push_back(prefix.back() + model.blocks()[b]->cost());
  const size_t cut_count = hi - lo;
  // best[k][j]: the smallest largest cost of cutting blocks [0, j) into k ranges; from[k][j] the
  // start of the last of them. The first minimum wins ties, so the cut is a function of the model.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(positions + 1, std::vector<double>(cut_count + 1, kNone));
  std::vector<std::vector<size_t>> from(positions + 1, std::vector<size_t>(cut_count + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= positions; ++k)
    for (size_t j = k; j <= cut_count; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        const double worst = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (worst < best[k][j]) {
          best[k][j] = worst;
          from[k][j] = i;
        }
      }
  std::vector<size_t> cut(positions + 1);
  cut[positions] = cut_count;
  for (int k = positions; k > 0; --k) cut[k - 1] = from[k][cut[k]];
  for (size_t& c : cut) c += lo;
  cut.front() = 0, cut.back() = n;
  return cut;
}

std::pair<size_t, size_t> position_blocks(const std::vector<size_t>& cut, int position,
                                          bool vocab_parallel) {
  size_t first = cut[position], last = cut[position + 1];
  if (vocab_parallel) first = std::max<size_t>(first, 1), last = std::min(last, cut.back() - 1);
  return {first, last};
}

int shard_block(int vocab, int stages, int stage) {
  return static_cast<int>(int64_t{stage} * vocab_blocks(vocab) / stages);
}

namespace {

// A pipeline's layout over a model: the cut, and which positions and vocabulary shard each
// stage has.
struct Layout {
  const Gpt& model;
  pipeline::PipelineShape shape;
  std::vector<size_t> cut;

  Layout(const Gpt& m, const pipeline::PipelineShape& s)
      : model(m), shape(s), cut(cut_blocks(m, s.stages * s.chunks, s.vocab_parallel)) {
    if (s.vocab_parallel && vocab_blocks(m.shape().vocab) < s.stages)
      throw std::invalid_argument("pipeline.vocab_parallel: a vocabulary of " +
                                  std::to_string(m.shape().vocab) + " tokens is fewer than " +
                                  std::to_string(s.stages) + " blocks of " +
                                  std::to_string(kVocabBlock));
  }
  std::pair<size_t, size_t> blocks(int stage, int chunk) const {
    return position_blocks(cut, chunk * shape.stages + stage, shape.vocab_parallel);
  }
  bool holds(int stage, size_t block) const {
    for (int c = 0; c < shape.chunks; ++c) {
      const auto [first, last] = blocks(stage, c);
      if (block >= first && block < last) return true;
    }
    return false;
  }
  // The stage's vocabulary shard: [first, last) blocks, and its tokens.
  std::pair<int, int> shard(int stage) const {
    const int V = model.shape().vocab;
    return {shard_block(V, shape.stages, stage), shard_block(V, shape.stages, stage + 1)};
  }
  int64_t shard_tokens(int stage) const {
    const auto [first, last] = shard(stage);
    return std::min<int64_t>(model.shape().vocab, int64_t{last} * kVocabBlock) -
           int64_t{first} * kVocabBlock;
  }
};

// "embedding, transformer 0-1, head" for blocks [first, last).
std::string block_names(const Gpt& model, size_t first, size_t last) {
  std::string out;
  auto add = [&](const std::string& name) { out += (out.empty() ? "" : ", ") + name; };
  const size_t n = model.blocks().size();
  if (first == 0) add("embedding");
  const size_t t0 = std::max<size_t>(first, 1), t1 = std::min(last, n - 1);
  if (t0 + 1 == t1) add("transformer " + std::to_string(t0 - 1));
  if (t0 + 1 < t1) add("transformer " + std::to_string(t0 - 1) + "-" + std::to_string(t1 - 2));
  if (last == n) add("head");
  return out;
}

// The peak of what `stage` holds between passes, walking its program in order (see the header).
int64_t peak_activations(const Layout& layout, const pipeline::Program& program, int stage,
                         int sequences) {
  using pipeline::Op;
  auto stash = [&](int s, int chunk) {
    const auto [first, last] = layout.blocks(s, chunk);
    return GptActivations::storage_size(layout.model, first, last, sequences);
  };
  const int64_t rows = int64_t{sequences} * layout.model.shape().context;
  const int64_t vocab = rows * (layout.shard_tokens(stage) + layout.model.shape().dim);
  int64_t now = 0, peak = 0;
  for (const pipeline::Instruction& i : program.instructions[stage]) {
    switch (i.op) {
      case Op::kForward:
      case Op::kReload:
        now += stash(stage, i.chunk);
        break;
      case Op::kBackward:
      case Op::kEvict:
        now -= stash(stage, i.chunk);
        break;
      case Op::kHold:
        now += stash(i.peer, i.chunk);
        break;
      case Op::kReturn:
        now -= stash(i.peer, i.chunk);
        break;
      case Op::kVocabForward:
        now += vocab;
        break;
      case Op::kVocabBackward:
        now -= vocab;
        break;
      default:
        break;
    }
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace

std::vector<StageBalance> stage_balance(const Gpt& model, const pipeline::PipelineShape& shape,
                                        int sequences, int optimizer_floats) {
  if (const std::string problem = pipeline::check_shape(shape); !problem.empty())
    throw std::invalid_argument("pipeline." + problem);
  const Layout layout(model, shape);
  const pipeline::Program program = pipeline::generate(shape);
  const GptShape& s = model.shape();
  const int64_t C = s.dim, rows = int64_t{sequences} * s.context;
  const size_t n = model.blocks().size();
  std::vector<StageBalance> out(shape.stages);
  for (int q = 0; q < shape.stages; ++q) {
    StageBalance& b = out[q];
    StageMemory& m = b.memory;
    double macs_per_token = 0;
    for (int c = 0; c < shape.chunks; ++c) {
      const auto [first, last] = layout.blocks(q, c);
      b.blocks += (c == 0 ? "" : " + ") + block_names(model, first, last);
      for (size_t k = first; k < last; ++k) {
        m.params += model.blocks()[k]->param_count();
        m.grads += model.blocks()[k]->grad_count();
        macs_per_token += model.blocks()[k]->cost();
      }
    }
    int64_t owned = m.params;
    if (shape.vocab_parallel) {
      const auto [first, last] = layout.shard(q);
      const int64_t tokens = layout.shard_tokens(q);
      b.blocks += ", vocabulary ";
      b.blocks += std::to_string(first);
      if (last - first > 1) b.blocks += '-' + std::to_string(last - 1);
      // wte's rows, the output layer's rows (wte's again when tied: its gradient share apart).
      m.params += tokens * C * (s.tied ? 1 : 2);
      m.grads += 2 * tokens * C;
      if (q == 0) m.params += s.context * C, m.grads += s.context * C;  // wpe
      if (q == shape.stages - 1) m.params += 2 * C, m.grads += 2 * C;   // the final layer norm
      owned = m.params;
      macs_per_token += static_cast<double>(tokens) / s.vocab *
                        (model.blocks().front()->cost() + model.blocks().back()->cost());
    } else if (s.tied && layout.holds(q, n - 1) && !layout.holds(q, 0)) {
      m.params += int64_t{s.vocab} * C;  // a copy of wte for the output layer
    }
    m.optimizer = optimizer_floats * owned;
    m.activations = peak_activations(layout, program, q, sequences);
    b.forward_macs = macs_per_token * static_cast<double>(rows);
  }
  return out;
}

namespace {

// The median of `repeats` timings of `run`, `prepare` untimed before each.
double median_seconds(int repeats, const std::function<void()>& prepare,
                      const std::function<void()>& run) {
  std::vector<double> seconds;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    prepare();
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

InstructionTimes measure_instruction_times(const Gpt& model, int sequences,
                                           std::shared_ptr<const kernels::Backend> be,
                                           int repeats) {
  using kernels::Buffer;
  const GptShape& s = model.shape();
  const int64_t C = s.dim, rows = int64_t{sequences} * s.context;
  std::vector<float> host(model.param_count());
  model.init(1, host.data());
  const Buffer<float> params = Buffer<float>::from_host(be, host.data(), model.param_count());
  Buffer<float> grads(be, model.grad_count());
  std::vector<int32_t> tokens(rows + 1);
  for (int64_t i = 0; i <= rows; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % s.vocab);
  const Buffer<int32_t> inputs = Buffer<int32_t>::from_host(be, tokens.data(), rows);
  const Buffer<int32_t> targets = Buffer<int32_t>::from_host(be, tokens.data() + 1, rows);
  const TokenBatch batch{sequences, inputs.data(), targets.data(), 1.0f / static_cast<float>(rows)};
  // A small residual stream and its gradient, reset before each pass.
  std::vector<float> wave(rows * C);
  for (int64_t i = 0; i < rows * C; ++i) wave[i] = 0.01f * std::sin(0.1f * static_cast<float>(i));
  Buffer<float> grad(be, rows * C);
  auto reset = [&](float* at) { be->copy_from_host(at, wave.data(), rows * C * 4); };

  InstructionTimes t;
  for (size_t b = 0; b < model.blocks().size(); ++b) {
    GptActivations acts(be, model, b, b + 1, sequences);
    Buffer<float> scratch(be, GptActivations::scratch_size(model, b, b + 1, sequences));
    auto input = [&] {
      if (b > 0) reset(acts.input());
    };
    t.forward.push_back(
        median_seconds(repeats, input, [&] { acts.forward(batch, params.data()); }));
    t.backward.push_back(median_seconds(
        repeats, [&] { reset(grad.data()); },
        [&] { acts.backward(batch, params.data(), grad.data(), grads.data(), scratch.data()); }));
  }

  // One vocabulary block of the output layer, as the vocabulary passes compute it (host memory).
  const int tokens_per_block = std::min(s.vocab, kVocabBlock);
  const int blocks = vocab_blocks(s.vocab);
  Buffer<float> x(be, rows * C), logits(be, rows * tokens_per_block),
      dlogits(be, rows * tokens_per_block), parts(be, rows * C),
      dw(be, int64_t{tokens_per_block} * C);
  reset(x.data());
  std::vector<float> stats(static_cast<size_t>(blocks) * rows * 2, 1.0f);
  const float* w = params.data();  // wte's first rows (the untied layer's have the same shape)
  t.vocab_forward = median_seconds(
      repeats, [] {},
      [&] {
        be->gemm(false, true, static_cast<int>(rows), tokens_per_block, s.dim, 1.0f, x.data(), w,
                 0.0f, logits.data());
        vocab_block_stats(logits.data(), rows, tokens_per_block, s.vocab, 0, 1, stats.data());
      });
  t.vocab_backward = median_seconds(
      repeats, [] {},
      [&] {
        vocab_softmax(logits.data(), rows, tokens_per_block, s.vocab, 0, 1, stats.data(),
                      targets.data(), nullptr, dlogits.data(), batch.grad_scale);
        vocab_output_backward(*be, rows, s.dim, s.vocab, 0, 1, dlogits.data(), x.data(), w,
                              dw.data(), parts.data());
      });
  t.transfer = median_seconds(
      repeats, [] {}, [&] { be->copy(grad.data(), x.data(), rows * C * int64_t{sizeof(float)}); });

  Buffer<float> p = params, mv(be, 2 * model.param_count());
  t.update = median_seconds(
      repeats, [] {},
      [&] {
        be->adam_update(p.data(), grads.data(), mv.data(), mv.data() + model.param_count(),
                        model.param_count(), kernels::AdamParams{.lr = 1e-4f});
      });
  return t;
}

pipeline::Costs measured_costs(const Gpt& model, const pipeline::PipelineShape& shape,
                               const InstructionTimes& times) {
  using pipeline::Op;
  const Layout layout(model, shape);
  const GptShape& s = model.shape();
  const int p = shape.stages, v = shape.chunks;
  pipeline::Costs costs;
  costs.by_stage.assign(p, {});
  for (int q = 0; q < p; ++q) {
    auto& c = costs.by_stage[q];
    auto at = [&](Op op) -> double& { return c[static_cast<int>(op)]; };
    // A chunk's passes: the mean of the stage's chunks (the simulator has one cost per op).
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [first, last] = layout.blocks(q, chunk);
      for (size_t b = first; b < last; ++b) {
        at(Op::kForward) += times.forward[b] / v;
        at(Op::kBackward) += times.backward[b] / v;
      }
    }
    const auto [first, last] = layout.shard(q);
    if (shape.vocab_parallel) {
      at(Op::kEmbedForward) = times.forward.front() / p;
      at(Op::kEmbedBackward) = times.backward.front() / p;
      at(Op::kVocabForward) = (last - first) * times.vocab_forward;
      at(Op::kVocabBackward) = (last - first) * times.vocab_backward;
    }
    for (Op receive : {Op::kRecvActivation, Op::kRecvGradient, Op::kRecvEmbedding,
                       Op::kRecvEmbedGradient, Op::kRecvVocabInput})
      at(receive) = times.transfer;  // [B, T, C] each
    // The other stages' block parts, a mean share of the vocabulary blocks each.
    at(Op::kRecvVocabGradient) = static_cast<double>(vocab_blocks(s.vocab)) / p * times.transfer;
    // BPipe's lent stashes, in units of [B, T, C].
    const double unit = static_cast<double>(s.context) * s.dim;
    auto stash_transfers = [&](int stage) {
      const auto [f, l] = layout.blocks(stage, 0);
      return static_cast<double>(GptActivations::storage_size(model, f, l, 1)) / unit *
             times.transfer;
    };
    at(Op::kHold) = stash_transfers(p - 1 - q);
    at(Op::kReload) = stash_transfers(q);
  }
  return costs;
}

}  // namespace hippo::worker
