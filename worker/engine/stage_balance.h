// The balance of a pipelined gpt's stages: how the pipelined engine (pipelined_engine.h) cuts the
// model, what each stage then computes and holds, counted exactly from the model's shapes (gpt.h),
// and the simulator's costs (pipeline/simulator.h) from instruction times measured on a backend,
// so that it predicts the throughput of a pipeline before it runs.
//
// Memory, per stage, in floats:
//   params       its blocks' parameters. Without vocabulary parallelism a tied output layer reads
//                wte, which lives with the embedding: a last stage without the embedding holds a
//                copy of it (as Megatron-LM does), counted here. With vocabulary parallelism its
//                transformer blocks, its shard's rows of wte (and of the untied output layer),
//                stage 0 wpe, the last stage the final layer norm: the stages' sum is the model's.
//   grads        the gradient of its blocks (gpt.h's layout: a tied head's share of wte's gradient
//                is kept apart, in the head's region); with vocabulary parallelism the shard's
//                rows.
//   optimizer    `optimizer_floats` per parameter it owns (sgd's momentum 1, adam's m and v 2;
//                a copy of wte is updated by stage 0 and refreshed, so it has none).
//   activations  the peak, in the stage's program order, of what it holds between passes: each
//                stashed micro-batch's activations (GptActivations::storage_size of its blocks),
//                its own or lent to it (BPipe), and with vocabulary parallelism each micro-batch's
//                logits of its shard and the output layer's input, from the output forward to
//                its backward. Scratch that a pass frees again is not counted.
// Compute: the multiply-adds of one micro-batch's forward on the stage (GptBlock::cost per token;
// with vocabulary parallelism the embedding's and the output layer's a shard's share each).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "pipeline/shape.h"
#include "pipeline/simulator.h"
#include "worker/engine/gpt.h"

namespace hippo::worker {

// The first block of each of `positions` ranges, then the number of blocks: ranges
// [cut[i], cut[i + 1]) minimizing the largest sum of costs. Throws std::invalid_argument when
// there are fewer blocks than positions. With `vocab_parallel` only the transformer blocks are
// cut (each range gets at least one); the first range starts at the embedding, the last ends
// with the head.
std::vector<size_t> cut_blocks(const Gpt& model, int positions, bool vocab_parallel = false);

// The blocks that pipeline position `position` runs in its forward and backward passes: the
// cut's range, without the embedding and the head when they are vocabulary-parallel (every
// stage's vocabulary passes compute them).
std::pair<size_t, size_t> position_blocks(const std::vector<size_t>& cut, int position,
                                          bool vocab_parallel);

// Stage `stage` of `stages` has vocabulary blocks [shard_block(vocab, stages, stage),
// shard_block(vocab, stages, stage + 1)).
int shard_block(int vocab, int stages, int stage);

struct StageMemory {  // floats
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
  int64_t total() const { return params + grads + optimizer + activations; }
  bool operator==(const StageMemory&) const = default;
};

struct StageBalance {
  std::string blocks;       // "embedding, transformer 0-1", "transformer 2-3, head, vocabulary 4-7"
  double forward_macs = 0;  // multiply-adds of one micro-batch's forward
  StageMemory memory;
};

// Each stage's balance for micro-batches of `sequences` sequences (see above). Throws
// std::invalid_argument when the shape does not fit the model (as PipelinedGpt would).
std::vector<StageBalance> stage_balance(const Gpt& model, const pipeline::PipelineShape& shape,
                                        int sequences, int optimizer_floats);

// Seconds that one micro-batch's work takes on a backend, measured by running it.
struct InstructionTimes {
  std::vector<double> forward, backward;  // [model blocks]: a block's passes (the head's: the
                                          // whole vocabulary's output layer, softmax and loss)
  double vocab_forward = 0;   // one vocabulary block's logits and statistics (vocabulary passes)
  double vocab_backward = 0;  // its softmax, output-layer gradient and input-gradient part
  double transfer = 0;        // one [B, T, C] message between stages (a copy)
  double update = 0;          // the optimizer step over all parameters (adam)
};

// Times each of them on `be` (the median of `repeats` runs) for micro-batches of `sequences`.
InstructionTimes measure_instruction_times(const Gpt& model, int sequences,
                                           std::shared_ptr<const kernels::Backend> be,
                                           int repeats = 3);

// The simulator's per-stage costs of `shape`'s program from those times: a stage's forward and
// backward of a chunk are its blocks' (as cut_blocks cuts them), its vocabulary passes its
// shard's vocabulary blocks' and its embedding passes a p-th of the embedding's; every receive a
// transfer.
pipeline::Costs measured_costs(const Gpt& model, const pipeline::PipelineShape& shape,
                               const InstructionTimes& times);

}  // namespace hippo::worker
