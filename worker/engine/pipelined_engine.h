// The pipelined training path of the gpt model: one optimizer step's micro-batches run through a
// pipeline schedule (pipeline/schedules.h) by the interpreter (pipeline/interpreter.h), one
// thread per pipeline stage, each stage computing with a backend of its own on its device of the
// run's device group (device_group.h):
//
//   CPU threads   a CPU backend per stage; activations and gradients move between stages by the
//                 in-process queue transport (host memory, shared by all stages).
//   GPUs          a CUDA backend per stage on a stream of its own (several stages may share a
//                 GPU); activations and gradients move by device copies between stages on one
//                 GPU and by NCCL between GPUs (pipeline/cuda_transport.h).
//
// State. The parameters, gradients and optimizer state stay one contiguous buffer each, in the
// memory of the engine's backend ("home": the group's first device). Each step, every stage's
// work is ordered after the home's (the token uploads, the previous update: Backend::wait_for)
// and the home's after every stage's. A stage whose device is the home's (every CPU stage; GPU
// stages on the first GPU) reads the parameters and writes its regions of the gradient buffer
// in place. A stage on another GPU keeps a full-size mirror of parameters and gradients there:
// before the program it copies in the parameter regions of its blocks (and the embedding, which
// a tied head reads) and the step's tokens, after it the home copies back its gradient regions
// (Backend::copy_from). Stage buffers (activations, gradients between stages, loans) are kept
// from step to step: no device memory is freed while NCCL transfers may be in flight.
//
// Cutting. With p stages and v chunks per stage the model's blocks (embedding, `layers`
// transformer blocks, head) are cut into p v contiguous, non-empty ranges ("positions"; chunk c
// of stage d is position c p + d), chosen to minimize the largest range's compute per token
// (GptBlock::cost; the backward is about twice the forward for every block, so the same cut
// balances it). The embedding costs ~C per token against ~12 C^2 + T C for a transformer block,
// and the head ~V C: they are cheap in compute, so the cut simply adds them to the first and last
// ranges (which then get fewer transformer blocks when the head is heavy, e.g. a large vocab).
// In parameters they are the heavy ones (V C + T C for the embedding); the cut does not balance
// memory. A tied output layer reads wte, which lives with the embedding on the first stage: the
// last stage reads it from the parameter buffer (or its mirror) and writes its share of wte's
// gradient into its own region (gpt.h), added in once per step.
//
// Vocabulary parallelism (shape.vocab_parallel; CPU stages only: the passes compute in host
// memory). The embedding and the output layer are cut into p shards of whole vocabulary blocks
// (gpt.h's kVocabBlock; stage q has blocks [q nb / p, (q + 1) nb / p)) and run in the program's
// vocabulary passes; the cut divides only the transformer blocks. Each stage embeds its shard's
// tokens (0 for the others'); stage 0 sums the shards in stage order and adds wpe. The last
// position ends with the final layer norm, whose output every stage multiplies by its rows of the
// output layer; the shards' block statistics go all to all, each stage computes its dlogits, its
// rows of the output layer's gradient and its blocks' parts of the input gradient, which the last
// stage sums in block order before the layer norm's backward. Stage 0 sends the embedding's
// gradient to every stage, which writes its rows of wte's gradient (stage 0 also wpe's). These are
// the unpipelined head's and embedding's sums in the same order, so the bits are the same.
// Each stage writes only its shard's regions of the gradient buffer; the parameters, gradients
// and optimizer state are still one buffer, updated after the program as above.
//
// Exactness. Each position's backward passes run in ascending micro-batch order (every generator
// guarantees it; the stage checks it), and a position's micro-batch gradient is added to its
// region of the gradient buffer exactly as the unpipelined path adds the whole buffer's, with the
// same kernels on the same kind of device, so the gradients, and so the parameters after any
// number of steps, are bit for bit the same as the unpipelined run's over the same micro-batches
// on that kind of device. The optimizer step of the program is where a stage's work ends; the
// update itself runs once over the whole parameter buffer after the program (the engine's, on
// the home device), since wte's update needs the last stage's share.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "pipeline/interpreter.h"
#include "pipeline/program.h"
#include "pipeline/schedules.h"
#include "worker/engine/device_group.h"
#include "worker/engine/gpt.h"
#include "worker/engine/stage_balance.h"

namespace hippo::worker {

class PipelinedGpt {
 public:
  // `shape` as pipeline/schedules.h's check_shape accepts (else std::invalid_argument naming the
  // field, "pipeline.microbatches: ..."). The stages compute on `group` (a CPU group: CPU
  // backends of `threads_per_stage` threads; a CUDA group: a stream of its own per stage, on the
  // GPUs of DeviceGroup::stage_gpus); `home` is the engine's backend, whose memory holds what
  // gradients() reads and writes (for a CUDA group, the group's first GPU).
  PipelinedGpt(const Gpt& model, const pipeline::PipelineShape& shape,
               std::shared_ptr<const kernels::Backend> home, const DeviceGroup& group,
               int threads_per_stage);
  ~PipelinedGpt();

  const std::vector<size_t>& cut() const { return cut_; }
  // The device of each stage: "cpu" or "cuda:N".
  std::vector<std::string> stage_devices() const;
  // Each stage's peak of the bytes its own buffers held at once (activations, messages, loans,
  // vocabulary buffers, scratch, mirrors: counted, since CPU stages share one process), over the
  // steps so far. The state (parameters, gradients, optimizer) is the engine's: not in it.
  std::vector<int64_t> stage_peak_bytes() const;

  // The precision of the stages' products from the next step on (Backend::set_precision).
  void set_precision(kernels::Precision precision);

  // Gradients of one optimizer step into grads[model.grad_count()] (overwritten; reduce_tied not
  // yet applied): shape.microbatches micro-batches of `sequences` sequences each, whose tokens
  // are inputs/targets[microbatches * sequences, T] (micro-batch m at row m * sequences).
  // micro_grads[model.grad_count()] is scratch (when microbatches > 1). All in home's memory.
  void gradients(const float* params, const int32_t* inputs, const int32_t* targets, int sequences,
                 float grad_scale, float* grads, float* micro_grads);

 private:
  class Stage;
  // A queue transport for CPU stages, a CUDA transport for GPU stages.
  std::unique_ptr<pipeline::Transport> make_transport() const;

  const Gpt& model_;
  pipeline::Program program_;
  std::vector<size_t> cut_;
  std::shared_ptr<const kernels::Backend> home_;
  DeviceGroup group_;
  std::vector<std::unique_ptr<Stage>> stages_;
  // Kept from step to step (a CUDA transport sets up its links once); dropped after a failed
  // step (an aborted transport stays aborted).
  std::unique_ptr<pipeline::Transport> transport_;
};

}  // namespace hippo::worker
