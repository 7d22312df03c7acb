// The pipelined training path of the gpt model: one optimizer step's micro-batches run through a
// pipeline schedule (pipeline/schedules.h) by the interpreter (pipeline/interpreter.h), one CPU
// thread per pipeline stage, activations and gradients moved by the in-process queue transport.
//
// Cutting. With p stages and v chunks per stage the model's blocks (embedding, `layers`
// transformer blocks, head) are cut into p v contiguous, non-empty ranges ("positions"; chunk c
// of stage d is position c p + d), chosen to minimize the largest range's compute per token
// (GptBlock::cost; the backward is about twice the forward for every block, so the same cut
// balances it). The embedding costs ~C per token against ~12 C^2 + T C for a transformer block,
// and the head ~V C: they are cheap in compute, so the cut simply adds them to the first and last
// ranges (which then get fewer transformer blocks when the head is heavy, e.g. a large vocab).
// In parameters they are the heavy ones (V C + T C for the embedding); the cut does not balance
// memory, which on CPU threads is shared anyway. A tied output layer reads wte, which lives with
// the embedding on the first stage: the last stage reads it from the shared parameter buffer and
// writes its share of wte's gradient into its own region (gpt.h), added in once per step.
//
// Exactness. Each position's backward passes run in ascending micro-batch order (every generator
// guarantees it; the stage checks it), and a position's micro-batch gradient is added to its
// region of the gradient buffer exactly as the unpipelined path adds the whole buffer's, so the
// gradients, and so the parameters after any number of steps, are bit for bit the same as the
// unpipelined run's over the same micro-batches. The optimizer step of the program is where a
// stage's work ends; the update itself runs once over the whole parameter buffer after the
// program (the engine's, as for one device), since wte's update needs the last stage's share.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "pipeline/program.h"
#include "pipeline/schedules.h"
#include "worker/engine/gpt.h"

namespace hippo::worker {

// The first block of each of `positions` ranges, then the number of blocks: ranges
// [cut[i], cut[i + 1]) minimizing the largest sum of costs. Throws std::invalid_argument when
// there are fewer blocks than positions.
std::vector<size_t> cut_blocks(const Gpt& model, int positions);

class PipelinedGpt {
 public:
  // `shape` as pipeline/schedules.h's check_shape accepts (else std::invalid_argument naming the
  // field, "pipeline.microbatches: ..."); each stage computes with its own CPU backend of
  // `threads_per_stage` threads.
  PipelinedGpt(const Gpt& model, const pipeline::PipelineShape& shape, int threads_per_stage);
  ~PipelinedGpt();

  const std::vector<size_t>& cut() const { return cut_; }

  // Gradients of one optimizer step into grads[model.grad_count()] (overwritten; reduce_tied not
  // yet applied): shape.microbatches micro-batches of `sequences` sequences each, whose tokens
  // are inputs/targets[microbatches * sequences, T] (micro-batch m at row m * sequences).
  // micro_grads[model.grad_count()] is scratch. All buffers in host memory (CPU backends).
  void gradients(const float* params, const int32_t* inputs, const int32_t* targets, int sequences,
                 float grad_scale, float* grads, float* micro_grads);

 private:
  class Stage;
  const Gpt& model_;
  pipeline::Program program_;
  std::vector<size_t> cut_;
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace hippo::worker
