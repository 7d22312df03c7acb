// Each pipeline stage's compute and memory (stage_balance.h) against small models counted by
// hand, the invariants of the vocabulary-parallel cut, and the simulator's costs from measured
// instruction times.
#include "worker/engine/stage_balance.h"

#include <gtest/gtest.h>

#include "pipeline/schedules.h"
#include "pipeline/simulator.h"

namespace hippo::worker {
namespace {

using pipeline::PipelineShape;
using pipeline::Schedule;

Gpt tiny(int vocab) {
  return Gpt(GptShape::parse({{"type", "gpt"},
                              {"layers", 2},
                              {"heads", 1},
                              {"dim", 4},
                              {"context", 2},
                              {"vocab", vocab}}));
}

// C = 4, T = 2, B = 1 (N = 2 rows), V = 8, tied. Blocks and their parameters, forward cost per
// token, stash (floats per micro-batch):
//   embedding    (V + T) C = 40                 C = 4            its output N C = 8
//   transformer  12 C^2 + 13 C = 244            12 C^2 + T C = 200
//                output N C = 8, saved N (15 C + 4) + B heads T^2 = 128 + 4 = 132
//   head         2 C = 8 (gradient 8 + V C = 40) V C = 32        output N = 2, saved
//                N (C + 2 + 2 V) = 44
// 2 stages cut by cost: [embedding, transformer 0] = 204, [transformer 1, head] = 232.
TEST(StageBalanceTest, HandCountedPipeline) {
  const Gpt model = tiny(8);
  const auto stages = stage_balance(model, {2, 2, Schedule::kOneFOneB, 1, false}, 1, 2);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].blocks, "embedding, transformer 0");
  EXPECT_EQ(stages[1].blocks, "transformer 1, head");
  // Stage 0: 40 + 244 parameters and gradients, adam's 2 values each; two micro-batches stashed
  // (1F1B's warm-up), each 8 (embedding output) + 8 + 132 (transformer).
  EXPECT_EQ(stages[0].memory, (StageMemory{284, 284, 568, 2 * 148}));
  EXPECT_EQ(stages[0].forward_macs, (4 + 200) * 2);
  // Stage 1: 244 + 8, and a copy of wte (V C = 32) for the tied output layer, which stage 0
  // updates; the gradient 244 + 40 (the head's share of wte's apart); one micro-batch stashed:
  // its input 8, the transformer's 8 + 132, the head's 2 + 44.
  EXPECT_EQ(stages[1].memory, (StageMemory{284, 284, 504, 194}));
  EXPECT_EQ(stages[1].forward_macs, (200 + 32) * 2);
  // sgd: one value per parameter it owns.
  EXPECT_EQ(stage_balance(model, {2, 2, Schedule::kOneFOneB, 1, false}, 1, 1)[1].memory.optimizer,
            252);
}

// V = 8192: two vocabulary blocks, one per stage (4,096 tokens, 16,384 values of wte each). The
// cut gives each stage one transformer block; stage 0 has wpe (T C = 8), the last the final
// layer norm (2 C = 8). Gradients: the shard's rows twice (the embedding's and the tied output
// layer's share). Activations: the transformer's stash 8 + 8 + 132 = 148 per micro-batch, and
// each micro-batch's shard logits and input between its output passes, N (4096 + C) = 8200;
// in the program both stages run two forwards and two output forwards before the first output
// backward.
TEST(StageBalanceTest, HandCountedVocabularyParallelPipeline) {
  const Gpt model = tiny(8192);
  const auto stages = stage_balance(model, {2, 2, Schedule::kOneFOneB, 1, true}, 1, 2);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].blocks, "transformer 0, vocabulary 0");
  EXPECT_EQ(stages[1].blocks, "transformer 1, vocabulary 1");
  EXPECT_EQ(stages[0].memory, (StageMemory{16636, 33020, 33272, 2 * 148 + 2 * 8200}));
  EXPECT_EQ(stages[1].memory, (StageMemory{16636, 33020, 33272, 2 * 148 + 2 * 8200}));
  // Per token: a transformer block, and half of the embedding's C and the output layer's V C.
  EXPECT_EQ(stages[0].forward_macs, (200 + (4 + 8192 * 4) / 2) * 2);
  // The stages hold the model's parameters and gradient buffer once.
  EXPECT_EQ(stages[0].memory.params + stages[1].memory.params, model.param_count());
  EXPECT_EQ(stages[0].memory.grads + stages[1].memory.grads, model.grad_count());
}

TEST(StageBalanceTest, SumsAndStashesAgreeWithTheModelAndTheSimulator) {
  const Gpt model(GptShape::parse({{"type", "gpt"},
                                   {"layers", 8},
                                   {"heads", 2},
                                   {"dim", 16},
                                   {"context", 8},
                                   {"vocab", 3 * 4096 + 5},
                                   {"tied", false}}));
  for (int p : {2, 3}) {
    const PipelineShape shape{p, 6, Schedule::kInterleaved, 2, true};
    const auto stages = stage_balance(model, shape, 2, 2);
    int64_t params = 0, grads = 0;
    for (const StageBalance& s : stages) params += s.memory.params, grads += s.memory.grads;
    EXPECT_EQ(params, model.param_count());
    EXPECT_EQ(grads, model.grad_count());
  }
  // Without vocabulary passes or loans, a stage's activations are its peak stash (the
  // simulator's) times one micro-batch's: 1f1b, 4 stages of 2 transformer blocks each.
  const PipelineShape shape{4, 8, Schedule::kOneFOneB, 1, false};
  const auto stages = stage_balance(model, shape, 2, 2);
  const pipeline::SimulationReport report = pipeline::simulate(pipeline::generate(shape));
  const std::vector<size_t> cut = cut_blocks(model, 4);
  for (int q = 0; q < 4; ++q)
    EXPECT_EQ(stages[q].memory.activations,
              report.peak_stash[q] * GptActivations::storage_size(model, cut[q], cut[q + 1], 2));
  // BPipe lends stage 0's stashes beyond its cap to stage 3.
  const auto lent = stage_balance(model, {4, 8, Schedule::kBPipe, 1, false}, 2, 2);
  EXPECT_LT(lent[0].memory.activations, stages[0].memory.activations);
  EXPECT_GT(lent[3].memory.activations, stages[3].memory.activations);
  // A shape that does not fit the model is refused, as the engine refuses it.
  // (4 vocabulary blocks for 5 stages).
  EXPECT_THROW(stage_balance(model, {5, 10, Schedule::kOneFOneB, 1, true}, 2, 2),
               std::invalid_argument);
}

TEST(StageBalanceTest, CostsComeFromMeasuredTimes) {
  const Gpt model = tiny(8192);
  // Measured (tiny, so quick): every time positive.
  const InstructionTimes measured =
      measure_instruction_times(model, 1, kernels::make_cpu_backend(1), 1);
  ASSERT_EQ(measured.forward.size(), model.blocks().size());
  for (size_t b = 0; b < model.blocks().size(); ++b) {
    EXPECT_GT(measured.forward[b], 0);
    EXPECT_GT(measured.backward[b], 0);
  }
  EXPECT_GT(measured.vocab_forward, 0);
  EXPECT_GT(measured.vocab_backward, 0);
  // Given times: a stage's forward is its blocks', a vocabulary pass its shard's blocks'. The
  // output layer (V C per token) outweighs the rest: the plain cut leaves the head alone.
  InstructionTimes t;
  t.forward = {1, 10, 20, 100};
  t.backward = {2, 30, 40, 200};
  t.vocab_forward = 5, t.vocab_backward = 7, t.transfer = 0.5;
  using pipeline::Op;
  const pipeline::Costs plain = measured_costs(model, {2, 4, Schedule::kOneFOneB, 1, false}, t);
  EXPECT_EQ(plain.of(0, Op::kForward), 1 + 10 + 20);
  EXPECT_EQ(plain.of(1, Op::kBackward), 200);
  EXPECT_EQ(plain.of(1, Op::kRecvActivation), 0.5);
  const pipeline::Costs vocab = measured_costs(model, {2, 4, Schedule::kOneFOneB, 1, true}, t);
  EXPECT_EQ(vocab.of(1, Op::kForward), 20);
  EXPECT_EQ(vocab.of(1, Op::kVocabBackward), 7);
  EXPECT_EQ(vocab.of(0, Op::kEmbedForward), 0.5);
  // The simulator runs on them: the plain pipeline waits on its heavy last stage.
  const double without =
      pipeline::simulate(pipeline::generate({2, 4, Schedule::kOneFOneB, 1, false}), plain).makespan;
  const double with =
      pipeline::simulate(pipeline::generate({2, 4, Schedule::kOneFOneB, 1, true}), vocab).makespan;
  EXPECT_LT(with, without);
}

}  // namespace
}  // namespace hippo::worker
