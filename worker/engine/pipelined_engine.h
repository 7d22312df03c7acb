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
// State. Each stage holds its own parameters, gradients (and micro-batch gradients) and
// optimizer state, one contiguous buffer of each kind in its device's memory (llm.c's layout):
// the regions of gpt.h's layout that its blocks own, one after another (stage_balance.h counts
// them). Between the steps of a train() call these buffers are the state: at its first step the
// stages read their regions of the TrainState, in the engine's backend ("home": the group's first
// device), into them (split) and the TrainState's parameters and optimizer state are freed; they
// are written back into it, laid out as the unpipelined state (assemble), only when someone reads
// it: when train() returns (or fails), and when its after_step asks (engine.h's StepDone: an
// evaluation, a checkpoint, a fork). So a pipelined run holds one copy of its state, not two, and
// copies none per step. At the end of a train() call the stages free their state's buffers (the
// next call splits the state it is given). A stage computes its gradients in its buffers and
// applies its optimizer's update to them itself (the same elementwise kernel as the unpipelined
// update: the same bits). Every copy between the home and a stage is ordered by copy_from and
// wait_for. On another GPU than the home's a stage also copies the step's tokens. Stage buffers
// (activations, gradients between stages, loans) are kept from step to step: no device memory is
// freed while NCCL transfers may be in flight.
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
// last stage holds a copy of it and writes its share of wte's gradient into its own region
// (gpt.h), which stage 0 adds into wte's before its update (as Gpt::reduce_tied); the updated
// wte is then copied to the last stage.
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
// Each stage holds its shard's rows of wte (and of the untied output layer, and of a tied head's
// share of wte's gradient, which it adds into its rows before its update), stage 0 wpe, the last
// stage the final layer norm.
//
// Exactness. Each position's backward passes run in ascending micro-batch order (every generator
// guarantees it; the stage checks it), and a position's micro-batch gradient is added to its
// region of the gradient buffer exactly as the unpipelined path adds the whole buffer's, with the
// same kernels on the same kind of device, so the gradients, and so the parameters after any
// number of steps, are bit for bit the same as the unpipelined run's over the same micro-batches
// on that kind of device. The optimizer step of the program is where a stage's work ends; the
// updates run after the program (each stage's on a thread of its own), since stage 0's wte needs
// the last stage's share when tied.
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
#include "worker/engine/train_state.h"

namespace hippo::worker {

class PipelinedGpt {
 public:
  // `shape` as pipeline/schedules.h's check_shape accepts (else std::invalid_argument naming the
  // field, "pipeline.microbatches: ..."). The stages compute on `group` (a CPU group: CPU
  // backends of `threads_per_stage` threads; a CUDA group: a stream of its own per stage, on the
  // GPUs of DeviceGroup::stage_gpus); `home` is the engine's backend, whose memory holds the
  // TrainState that step() reads and writes (for a CUDA group, the group's first GPU).
  PipelinedGpt(const Gpt& model, const pipeline::PipelineShape& shape,
               std::shared_ptr<const kernels::Backend> home, const DeviceGroup& group,
               int threads_per_stage);
  ~PipelinedGpt();

  const std::vector<size_t>& cut() const { return cut_; }
  // The device of each stage: "cpu" or "cuda:N".
  std::vector<std::string> stage_devices() const;
  // Each stage's peak of the bytes its own buffers held at once (its parameters, gradients and
  // optimizer state, activations, messages, loans, vocabulary buffers, scratch, mirrors: counted,
  // since CPU stages share one process), over the steps so far.
  std::vector<int64_t> stage_peak_bytes() const;

  // The precision of the stages' products from the next step on (Backend::set_precision).
  void set_precision(kernels::Precision precision);

  // One optimizer step: shape.microbatches micro-batches of `sequences` sequences each, whose
  // tokens are inputs/targets[microbatches * sequences, T] (micro-batch m at row m * sequences,
  // in home's memory), then each stage's update of its own parameters. `load`: the stages first
  // read their regions of s (its parameters and optimizer state, which the engine has allocated
  // for update's optimizer) and s's two buffers are freed: the stages hold the state from then
  // on (holds_state()); otherwise they go on from what the last step left (s is not read).
  void step(TrainState& s, bool load, const int32_t* inputs, const int32_t* targets, int sequences,
            float grad_scale, const OptimizerUpdate& update);
  // Whether the stages hold a state (from a step with `load` to release()).
  bool holds_state() const { return held_; }
  // The state they hold into s.params and s.opt_state (allocated anew in home's memory), laid
  // out as the unpipelined state: the same bits. The stages first free their gradients' buffers
  // (made again at the next step), so that the copy does not raise the peak memory.
  // std::runtime_error where a stage's update failed (a device error) and left the stages no
  // consistent state.
  void assemble(TrainState& s);
  // The stages free their state's buffers (parameters, gradients, optimizer state) and hold none.
  void release();

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
  // Whether the stages hold a state, and whether a failed update left part of it a step ahead;
  // its optimizer's buffers per parameter (sgd: 1, adam: 2).
  bool held_ = false, lost_ = false;
  int optimizer_floats_ = 0;
};

}  // namespace hippo::worker
