// Runs a Program (program.h): each stage's instruction list on its own thread, against two small
// interfaces. The engine implements StageExecutor (the model chunks of one stage and the buffers
// they read and write); a Transport moves float buffers between stages (queue_transport.h between
// CPU threads, nccl_transport.h between GPUs). The interpreter trusts the program: check it with
// the simulator (simulator.h) first; the generators' programs are all checked by the tests.
#pragma once

#include <span>
#include <vector>

#include "pipeline/program.h"

namespace hippo::pipeline {

// The buffers the interpreter moves. Each is identified by (microbatch, chunk) and owned by the
// executor, which sizes it (sizes are fixed by the model, so a receive knows its size).
enum class Buffer {
  kActivationIn,   // the input of forward(mb, chunk), written by a receive activation
  kActivationOut,  // the output of forward(mb, chunk), read by a send activation
  kGradientIn,     // the gradient w.r.t. that output, written by a receive gradient
  kGradientOut,    // the gradient w.r.t. the input, written by backward, read by a send gradient
  kStash,          // what backward(mb, chunk) needs from its forward; evicted and reloaded
  kLoan,           // a partner's kStash that this stage holds for it (same size)
  // Vocabulary parallelism (program.h). For the kinds marked "per stage" the interpreter passes
  // the other stage in place of the chunk (the passes themselves have chunk 0).
  kEmbedding,        // this stage's shard of the embedding of mb, read by a send embedding
  kEmbeddingIn,      // stage 0: another stage's shard (per stage), written by a receive embedding
  kEmbedGradient,    // the gradient of the embedding of mb: sent by stage 0, received by the rest
  kVocabInput,       // the output layer's input (final hidden state) of mb: sent by the last stage
  kVocabStats,       // this stage's max and block sums of mb, read by a send vocab stats
  kVocabStatsIn,     // another stage's (per stage), written by a receive vocab stats
  kVocabGradient,    // the shard's input gradient per block of mb, read by a send vocab gradient
  kVocabGradientIn,  // last stage: another stage's (per stage), written by a receive vocab gradient
};

class StageExecutor {
 public:
  virtual ~StageExecutor() = default;
  virtual void forward(int microbatch, int chunk) = 0;
  virtual void backward(int microbatch, int chunk) = 0;
  virtual void optimizer_step() = 0;
  // The vocabulary passes of micro-batch mb (program.h); only a program with vocab_parallel has
  // them, and an executor without them throws std::logic_error.
  virtual void embed_forward(int microbatch);
  virtual void embed_backward(int microbatch);
  virtual void vocab_forward(int microbatch);
  virtual void vocab_backward(int microbatch);
  // The memory of one buffer; a receive writes all of it, a send reads all of it.
  virtual std::span<float> buffer(Buffer which, int microbatch, int chunk) = 0;
  // The buffer's contents have left this stage (an evicted stash, a returned loan): free it.
  virtual void release(Buffer which, int microbatch, int chunk) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends `data` from stage `from` to stage message.peer; `message` is the send instruction as the
  // sender executes it. Buffered: it returns without waiting for the receiver, and `data` may be
  // reused as soon as it returns (as far as the caller's device order is concerned).
  virtual void send(int from, const Instruction& message, std::span<const float> data) = 0;
  // Receives into `data` the next message of message's channel from stage `from` to stage
  // message.peer. The message must be `message` (matching_send of the receive) and carry
  // data.size() floats, else std::runtime_error.
  virtual void receive(int from, const Instruction& message, std::span<float> data) = 0;
  // Makes every waiting and future receive throw: one stage failed, so the others must stop.
  virtual void abort() = 0;
};

// Executes stage `stage` of `program` on the calling thread.
void run_stage(const Program& program, int stage, StageExecutor& executor, Transport& transport);

// One thread per stage (executors[s] runs stage s), joined before returning. If a stage throws,
// the transport is aborted so no other stage waits forever, and the first error is rethrown.
void run_program(const Program& program, const std::vector<StageExecutor*>& executors,
                 Transport& transport);

}  // namespace hippo::pipeline
