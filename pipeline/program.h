// A pipeline schedule as a program: for each pipeline stage (one device, or one CPU thread) the
// list of instructions it executes in order. Generators (schedules.h) write programs, the
// simulator (simulator.h) checks and times them, the interpreter (interpreter.h) runs them.
//
// Communication is point to point and explicit: every send on one stage must be matched by the
// receive of the same kind on its peer. Sends are buffered (they never wait for the receiver);
// receives wait for the matching send. Between two stages, the messages of one channel (see
// `channel`) arrive in the order they were sent, so the k-th receive of a channel matches the k-th
// send (NCCL has no tags; the simulator checks that the order agrees).
//
// Model chunks: with v chunks per device (interleaved 1F1B) the model is cut into v*p pipeline
// positions; chunk c of device d is position c*p + d (Megatron-LM's layout), so a micro-batch
// visits devices 0..p-1 once per chunk. Every other schedule has one chunk, chunk 0.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

namespace hippo::pipeline {

enum class Op : uint8_t {
  kForward,         // forward of (microbatch, chunk); stashes what its backward needs
  kBackward,        // backward of (microbatch, chunk); frees the stash, accumulates gradients
  kSendActivation,  // the forward's output to the next position's device (peer)
  kRecvActivation,  // the previous position's output, the input of this forward
  kSendGradient,    // the gradient with respect to this chunk's input, to the previous position
  kRecvGradient,    // the gradient with respect to this chunk's output, from the next position
  kEvict,           // lend the stash of (microbatch, chunk) to the partner stage (peer), free it
  kHold,            // partner side of kEvict: receive and keep the lent stash
  kReturn,          // partner side of kReload: send the lent stash back, free it
  kReload,          // receive the own stash back from the partner, before its backward
  kOptimizerStep,   // apply the accumulated gradients (after the last backward of the stage)
  // Vocabulary parallelism (Program::vocab_parallel): the token embedding and the output layer
  // (projection, softmax, cross-entropy) are cut into p vocabulary shards, one per stage. Their
  // passes and messages carry chunk 0; see schedules.h for where the generator puts them.
  kEmbedForward,       // this stage's shard of micro-batch mb's token embedding (0 elsewhere)
  kEmbedBackward,      // the shard's embedding gradient from the gradient of the embedding
  kVocabForward,       // this stage's shard of the logits, their max and per-block sums of exp
  kVocabBackward,      // the shard's softmax, loss, output-layer gradient and input gradient part
  kSendEmbedding,      // the shard's embedding to stage 0 (peer)
  kRecvEmbedding,      // stage 0: a stage's shard of the embedding (summed in stage order)
  kSendEmbedGradient,  // stage 0: the gradient of the embedding to every other stage
  kRecvEmbedGradient,  // that gradient, from stage 0
  kSendVocabInput,     // last stage: the output layer's input (the final hidden state) to a stage
  kRecvVocabInput,     // that input, from the last stage
  kSendVocabStats,     // the shard's max and block sums to another stage (all to all)
  kRecvVocabStats,     // another stage's max and block sums
  kSendVocabGradient,  // the shard's input gradient, one part per vocabulary block, to the last
                       // stage
  kRecvVocabGradient,  // last stage: a stage's parts (summed in block order before the backward)
};
constexpr int kOpCount = 25;

// Lower-case words for messages: "forward", "send activation", ...
const char* op_name(Op op);

// Sends and their receives pair up per channel: send activation -> receive activation, send
// gradient -> receive gradient, evict -> hold, return -> reload, and each vocabulary send to its
// receive.
enum class Channel : uint8_t {
  kActivation,
  kGradient,
  kLend,
  kGiveBack,
  kEmbedding,
  kEmbedGradient,
  kVocabInput,
  kVocabStats,
  kVocabGradient,
  kNone
};
Channel channel(Op op);
bool is_send(Op op);
bool is_receive(Op op);

struct Instruction {
  Op op = Op::kForward;
  int microbatch = -1;  // -1 for kOptimizerStep
  int chunk = 0;
  int peer = -1;  // the other stage of a send or receive, else -1

  bool operator==(const Instruction&) const = default;
};

// The send instruction that `receive`, executed by `stage` of a `stages`-stage program, matches:
// the op, micro-batch and chunk as the sender executes it, with peer == stage. An activation
// arriving at stage 0 comes from the previous chunk of the last stage (chunk - 1), a gradient
// arriving at stage p-1 from the next chunk of stage 0 (chunk + 1); otherwise chunks agree.
Instruction matching_send(int stages, int stage, const Instruction& receive);

// "forward mb 3", "send activation mb 3 chunk 1 to stage 2", "optimizer step"
std::string describe(const Instruction& instruction);

// A one-way connection between two stages: `from` sends to `to` on `channel`.
struct Link {
  int from = 0, to = 0;
  Channel channel = Channel::kNone;

  auto operator<=>(const Link&) const = default;
};

// How a transport between GPUs moves a link's messages: device copies when both stages run on
// one GPU, NCCL between two GPUs (NCCL needs a GPU per rank).
enum class LinkKind { kDeviceCopy, kNccl };

struct Program {
  std::string schedule;                                // the generator's name, for reports
  int stages = 0;                                      // p: devices
  int microbatches = 0;                                // m: per optimizer step
  int chunks = 1;                                      // v: model chunks per device
  std::vector<std::vector<Instruction>> instructions;  // [stages]: each stage's list, in order
  bool vocab_parallel = false;                         // with the vocabulary passes
};

// Every link that `program` sends on, once each, in (from, to, channel) order.
std::vector<Link> links(const Program& program);

// The kind of `link` when stage s runs on GPU devices[s] (std::invalid_argument unless devices
// has an entry for both stages).
LinkKind link_kind(const Link& link, const std::vector<int>& devices);

}  // namespace hippo::pipeline
