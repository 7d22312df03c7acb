#include "pipeline/program.h"

#include <set>
#include <stdexcept>

namespace hippo::pipeline {

const char* op_name(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kSendActivation:
      return "send activation";
    case Op::kRecvActivation:
      return "receive activation";
    case Op::kSendGradient:
      return "send gradient";
    case Op::kRecvGradient:
      return "receive gradient";
    case Op::kEvict:
      return "evict";
    case Op::kHold:
      return "hold";
    case Op::kReturn:
      return "return";
    case Op::kReload:
      return "reload";
    case Op::kOptimizerStep:
      return "optimizer step";
    case Op::kEmbedForward:
      return "embed forward";
    case Op::kEmbedBackward:
      return "embed backward";
    case Op::kVocabForward:
      return "vocab forward";
    case Op::kVocabBackward:
      return "vocab backward";
    case Op::kSendEmbedding:
      return "send embedding";
    case Op::kRecvEmbedding:
      return "receive embedding";
    case Op::kSendEmbedGradient:
      return "send embed gradient";
    case Op::kRecvEmbedGradient:
      return "receive embed gradient";
    case Op::kSendVocabInput:
      return "send vocab input";
    case Op::kRecvVocabInput:
      return "receive vocab input";
    case Op::kSendVocabStats:
      return "send vocab stats";
    case Op::kRecvVocabStats:
      return "receive vocab stats";
    case Op::kSendVocabGradient:
      return "send vocab gradient";
    case Op::kRecvVocabGradient:
      return "receive vocab gradient";
  }
  return "?";
}

Channel channel(Op op) {
  switch (op) {
    case Op::kSendActivation:
    case Op::kRecvActivation:
      return Channel::kActivation;
    case Op::kSendGradient:
    case Op::kRecvGradient:
      return Channel::kGradient;
    case Op::kEvict:
    case Op::kHold:
      return Channel::kLend;
    case Op::kReturn:
    case Op::kReload:
      return Channel::kGiveBack;
    case Op::kSendEmbedding:
    case Op::kRecvEmbedding:
      return Channel::kEmbedding;
    case Op::kSendEmbedGradient:
    case Op::kRecvEmbedGradient:
      return Channel::kEmbedGradient;
    case Op::kSendVocabInput:
    case Op::kRecvVocabInput:
      return Channel::kVocabInput;
    case Op::kSendVocabStats:
    case Op::kRecvVocabStats:
      return Channel::kVocabStats;
    case Op::kSendVocabGradient:
    case Op::kRecvVocabGradient:
      return Channel::kVocabGradient;
    default:
      return Channel::kNone;
  }
}

bool is_send(Op op) {
  return op == Op::kSendActivation || op == Op::kSendGradient || op == Op::kEvict ||
         op == Op::kReturn || op == Op::kSendEmbedding || op == Op::kSendEmbedGradient ||
         op == Op::kSendVocabInput || op == Op::kSendVocabStats || op == Op::kSendVocabGradient;
}

bool is_receive(Op op) {
  return op == Op::kRecvActivation || op == Op::kRecvGradient || op == Op::kHold ||
         op == Op::kReload || op == Op::kRecvEmbedding || op == Op::kRecvEmbedGradient ||
         op == Op::kRecvVocabInput || op == Op::kRecvVocabStats || op == Op::kRecvVocabGradient;
}

Instruction matching_send(int stages, int stage, const Instruction& receive) {
  Instruction send{Op::kSendActivation, receive.microbatch, receive.chunk, stage};
  switch (receive.op) {
    case Op::kRecvActivation:
      if (stage == 0) send.chunk -= 1;
      break;
    case Op::kRecvGradient:
      send.op = Op::kSendGradient;
      if (stage == stages - 1) send.chunk += 1;
      break;
    case Op::kHold:
      send.op = Op::kEvict;
      break;
    case Op::kReload:
      send.op = Op::kReturn;
      break;
    case Op::kRecvEmbedding:
      send.op = Op::kSendEmbedding;
      break;
    case Op::kRecvEmbedGradient:
      send.op = Op::kSendEmbedGradient;
      break;
    case Op::kRecvVocabInput:
      send.op = Op::kSendVocabInput;
      break;
    case Op::kRecvVocabStats:
      send.op = Op::kSendVocabStats;
      break;
    case Op::kRecvVocabGradient:
      send.op = Op::kSendVocabGradient;
      break;
    default:
      throw std::invalid_argument("matching_send: " + describe(receive) + " is no receive");
  }
  return send;
}

std::string describe(const Instruction& instruction) {
  std::string text = op_name(instruction.op);
  if (instruction.op == Op::kOptimizerStep) return text;
  text += " mb " + std::to_string(instruction.microbatch);
  if (instruction.chunk != 0) text += " chunk " + std::to_string(instruction.chunk);
  if (is_send(instruction.op)) text += " to stage " + std::to_string(instruction.peer);
  if (is_receive(instruction.op)) text += " from stage " + std::to_string(instruction.peer);
  return text;
}

std::vector<Link> links(const Program& program) {
  std::set<Link> found;
  for (int stage = 0; stage < std::ssize(program.instructions); ++stage)
    for (const Instruction& ins : program.instructions[stage])
      if (is_send(ins.op)) found.insert({stage, ins.peer, channel(ins.op)});
  return {found.begin(), found.end()};
}

LinkKind link_kind(const Link& link, const std::vector<int>& devices) {
  const int stages = static_cast<int>(devices.size());
  if (link.from < 0 || link.from >= stages || link.to < 0 || link.to >= stages)
    throw std::invalid_argument("link from stage " + std::to_string(link.from) + " to stage " +
                                std::to_string(link.to) + ": devices are given for " +
                                std::to_string(stages) + " stages");
  return devices[link.from] == devices[link.to] ? LinkKind::kDeviceCopy : LinkKind::kNccl;
}

}  // namespace hippo::pipeline
