#include "pipeline/schedules.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "pipeline/simulator.h"

namespace hippo::pipeline {

int bpipe_cap(int stages) {
  return (stages + 2) / 2;
}

namespace {

// A forward of (mb, chunk) on `device` with the receive of its input before it and the send of
// its output after it (none at the first and last pipeline positions).
void append_forward(std::vector<Instruction>& list, int p, int v, int device, int mb, int chunk) {
  const int position = chunk * p + device;
  if (position > 0) list.push_back({Op::kRecvActivation, mb, chunk, (device + p - 1) % p});
  list.push_back({Op::kForward, mb, chunk, -1});
  if (position < v * p - 1) list.push_back({Op::kSendActivation, mb, chunk, (device + 1) % p});
}

void append_backward(std::vector<Instruction>& list, int p, int v, int device, int mb, int chunk) {
  const int position = chunk * p + device;
  if (position < v * p - 1) list.push_back({Op::kRecvGradient, mb, chunk, (device + 1) % p});
  list.push_back({Op::kBackward, mb, chunk, -1});
  if (position > 0) list.push_back({Op::kSendGradient, mb, chunk, (device + p - 1) % p});
}

std::vector<Instruction> gpipe_stage(int p, int m, int device) {
  std::vector<Instruction> list;
  for (int mb = 0; mb < m; ++mb) append_forward(list, p, 1, device, mb, 0);
  for (int mb = 0; mb < m; ++mb) append_backward(list, p, 1, device, mb, 0);
  return list;
}

// 1F1B over v chunks (v = 1: plain 1F1B). Work unit u of a device walks micro-batches in groups
// of p: group u / (p*v), chunk (u / p) % v (descending for backwards), micro-batch
// group*p + u % p. Within one chunk both walks are in ascending micro-batch order. `extra` more
// warm-up forwards on every stage (vocabulary parallelism: as if a stage followed the last).
std::vector<Instruction> one_f_one_b_stage(int p, int m, int v, int device, int extra) {
  const int units = m * v;
  const int warmup =
      std::min(units, extra + (v == 1 ? p - 1 - device : (p - 1 - device) * 2 + (v - 1) * p));
  auto microbatch = [&](int u) { return u / (p * v) * p + u % p; };
  auto forward = [&](std::vector<Instruction>& list, int u) {
    append_forward(list, p, v, device, microbatch(u), u / p % v);
  };
  auto backward = [&](std::vector<Instruction>& list, int u) {
    append_backward(list, p, v, device, microbatch(u), v - 1 - u / p % v);
  };
  std::vector<Instruction> list;
  for (int u = 0; u < warmup; ++u) forward(list, u);
  for (int u = 0; u < units - warmup; ++u) {
    forward(list, warmup + u);
    backward(list, u);
  }
  for (int u = units - warmup; u < units; ++u) backward(list, u);
  return list;
}

// Where a forward or backward "group" (its receive, compute and send) starts: the receive if
// there is one, else the compute.
bool starts_group(const std::vector<Instruction>& list, size_t i, Op receive, Op compute) {
  if (list[i].op == receive) return true;
  return list[i].op == compute && (i == 0 || list[i - 1].op != receive);
}

// BPipe: stage `lender` (< its partner p-1-lender) keeps at most `cap` stashes. Before a forward
// group, or before the reload of a lent stash, that would exceed the cap, it evicts the resident
// stash with the largest micro-batch (the one needed last: backwards are in ascending order), and
// it reloads each lent stash at the start of its backward group. The partner's holds and returns
// are placed by time on `timeline` (the 1F1B program's, simulated without loans, default costs).
// Returns follow the reload order (one channel, in order) and each follows its hold. What the
// partner runs before an inserted instruction started (or ended) before the lender got there, so
// none of it waits for the lender's later work: no cycle, which the tests confirm for every shape.
void lend_stashes(Program& program, const std::vector<std::vector<TimedInstruction>>& timeline,
                  int lender, int cap) {
  const int partner = program.stages - 1 - lender;
  const std::vector<Instruction>& own = program.instructions[lender];
  const std::vector<Instruction>& theirs = program.instructions[partner];
  // A hold goes before the partner's first instruction that starts (a receive: gets its message)
  // at or after the evict, so the partner takes the stash as soon as it is free, perhaps while it
  // waits for a receive anyway. A return goes at the last place the partner reaches (its previous
  // instruction ended) at or before the reload, so the lender never waits. Neither goes after the
  // optimizer step.
  auto hold_place = [&](double time) {
    size_t k = 0;
    while (k + 1 < theirs.size() && timeline[partner][k].start < time) ++k;
    return k;
  };
  auto return_place = [&](double time) {
    size_t k = 0;
    while (k + 1 < theirs.size() && timeline[partner][k].end <= time) ++k;
    return k;
  };
  std::vector<Instruction> lender_list;
  std::set<int> resident;  // stashed micro-batches on the lender
  std::set<int> lent;      // micro-batches whose stash is with the partner
  std::vector<std::pair<size_t, int>> holds, returns;  // (partner position, micro-batch)
  std::map<int, size_t> hold_position;
  for (size_t i = 0; i < own.size(); ++i) {
    const Instruction& instruction = own[i];
    const int mb = instruction.microbatch;
    const double now = i > 0 ? timeline[lender][i - 1].end : 0;
    auto make_room = [&] {
      if (static_cast<int>(resident.size()) < cap) return;
      const int evicted = *resident.rbegin();
      resident.erase(evicted);
      lent.insert(evicted);
      lender_list.push_back({Op::kEvict, evicted, 0, partner});
      holds.push_back({hold_place(now), evicted});
      hold_position[evicted] = holds.back().first;
    };
    if (starts_group(own, i, Op::kRecvActivation, Op::kForward)) {
      make_room();
      resident.insert(mb);
    }
    if (starts_group(own, i, Op::kRecvGradient, Op::kBackward) && lent.count(mb)) {
      make_room();
      lent.erase(mb);
      resident.insert(mb);
      lender_list.push_back({Op::kReload, mb, 0, partner});
      size_t position = std::max(return_place(now), hold_position[mb]);
      if (!returns.empty()) position = std::max(position, returns.back().first);
      returns.push_back({position, mb});
    }
    if (instruction.op == Op::kBackward) resident.erase(mb);
    lender_list.push_back(instruction);
  }

  std::vector<Instruction> partner_list;
  size_t next_hold = 0, next_return = 0;
  std::set<int> held;
  auto emit_returns = [&](size_t k) {  // in reload order, each after its hold
    for (; next_return < returns.size() && returns[next_return].first == k &&
           held.count(returns[next_return].second);
         ++next_return)
      partner_list.push_back({Op::kReturn, returns[next_return].second, 0, lender});
  };
  for (size_t k = 0; k < theirs.size(); ++k) {
    emit_returns(k);  // returns first: the partner never holds more than it must
    for (; next_hold < holds.size() && holds[next_hold].first == k; ++next_hold) {
      partner_list.push_back({Op::kHold, holds[next_hold].second, 0, lender});
      held.insert(holds[next_hold].second);
    }
    emit_returns(k);
    partner_list.push_back(theirs[k]);
  }
  program.instructions[lender] = std::move(lender_list);
  program.instructions[partner] = std::move(partner_list);
}

// The vocabulary passes of one micro-batch on every stage: a block per stage that goes into its
// list at one instant of the plain program's timeline.
enum class VocabBlock { kEmbed, kOutputForward, kOutputBackward, kEmbedGradient };

std::vector<Instruction> vocab_block(VocabBlock kind, int p, int stage, int mb) {
  std::vector<Instruction> list;
  const int last = p - 1;
  switch (kind) {
    case VocabBlock::kEmbed:  // every shard's embedding, summed on stage 0 in stage order
      list.push_back({Op::kEmbedForward, mb, 0, -1});
      if (stage != 0) list.push_back({Op::kSendEmbedding, mb, 0, 0});
      for (int q = 1; stage == 0 && q < p; ++q) list.push_back({Op::kRecvEmbedding, mb, 0, q});
      break;
    case VocabBlock::kOutputForward:  // the final hidden state out, stats to all
      for (int q = 0; stage == last && q < last; ++q)
        list.push_back({Op::kSendVocabInput, mb, 0, q});
      if (stage != last) list.push_back({Op::kRecvVocabInput, mb, 0, last});
      list.push_back({Op::kVocabForward, mb, 0, -1});
      for (int q = 0; q < p; ++q)
        if (q != stage) list.push_back({Op::kSendVocabStats, mb, 0, q});
      break;
    case VocabBlock::kOutputBackward:  // stats from all, input gradients to the last stage
      for (int q = 0; q < p; ++q)
        if (q != stage) list.push_back({Op::kRecvVocabStats, mb, 0, q});
      list.push_back({Op::kVocabBackward, mb, 0, -1});
      if (stage != last) list.push_back({Op::kSendVocabGradient, mb, 0, last});
      for (int q = 0; stage == last && q < last; ++q)
        list.push_back({Op::kRecvVocabGradient, mb, 0, q});
      break;
    case VocabBlock::kEmbedGradient:  // stage 0's gradient of the embedding to every shard
      for (int q = 1; stage == 0 && q < p; ++q) list.push_back({Op::kSendEmbedGradient, mb, 0, q});
      if (stage != 0) list.push_back({Op::kRecvEmbedGradient, mb, 0, 0});
      list.push_back({Op::kEmbedBackward, mb, 0, -1});
      break;
  }
  return list;
}

// Vocabulary parallelism: for micro-batch mb, the embedding block at the start of stage 0's
// forward of (mb, chunk 0), the output-forward block at the end of the last stage's forward of
// (mb, last chunk) and the output-backward block at the start of its backward (one more
// warm-up forward in between: the program was generated with it, so the statistics' all-to-all
// has other work to overlap), the embedding-gradient block at the end of stage 0's backward of
// (mb, chunk 0), in the plain program's timeline (default costs). Each stage gets each block before
// its first instruction that starts at or after that instant. The instructions of every stage that
// start before one instant form a consistent cut (a receive that starts before it got a message
// sent before it), so putting the blocks, in one global order, at such cuts adds no cycle even
// though the output block is a barrier (its stats go all to all): the tests confirm it for every
// shape.
void add_vocab_passes(Program& program) {
  const SimulationReport plain = simulate(program);
  const int p = program.stages, v = program.chunks, last = p - 1;
  struct Placed {
    double time;
    VocabBlock kind;
    int mb;
    auto operator<=>(const Placed&) const = default;
  };
  std::vector<Placed> blocks;
  for (const TimedInstruction& t : plain.timeline[0]) {
    if (t.instruction.chunk != 0) continue;
    if (t.instruction.op == Op::kForward)
      blocks.push_back({t.start, VocabBlock::kEmbed, t.instruction.microbatch});
    if (t.instruction.op == Op::kBackward)
      blocks.push_back({t.end, VocabBlock::kEmbedGradient, t.instruction.microbatch});
  }
  for (const TimedInstruction& t : plain.timeline[last]) {
    if (t.instruction.chunk != v - 1) continue;
    if (t.instruction.op == Op::kForward)
      blocks.push_back({t.end, VocabBlock::kOutputForward, t.instruction.microbatch});
    if (t.instruction.op == Op::kBackward)
      blocks.push_back({t.start, VocabBlock::kOutputBackward, t.instruction.microbatch});
  }
  std::sort(blocks.begin(), blocks.end());
  for (int s = 0; s < p; ++s) {
    const std::vector<TimedInstruction>& timeline = plain.timeline[s];
    std::vector<Instruction> list;
    size_t next = 0;
    for (const Placed& block : blocks) {
      // Never after the optimizer step, the last instruction.
      while (next + 1 < timeline.size() && timeline[next].start < block.time)
        list.push_back(timeline[next++].instruction);
      for (const Instruction& ins : vocab_block(block.kind, p, s, block.mb)) list.push_back(ins);
    }
    for (; next < timeline.size(); ++next) list.push_back(timeline[next].instruction);
    program.instructions[s] = std::move(list);
  }
  program.vocab_parallel = true;
}

}  // namespace

Program generate(const PipelineShape& shape) {
  if (std::string problem = check_shape(shape); !problem.empty())
    throw std::invalid_argument(problem);
  const int p = shape.stages, m = shape.microbatches, v = shape.chunks;
  Program program{schedule_name(shape.schedule), p, m, v, {}};
  for (int device = 0; device < p; ++device) {
    program.instructions.push_back(
        shape.schedule == Schedule::kGPipe
            ? gpipe_stage(p, m, device)
            : one_f_one_b_stage(p, m, v, device, shape.vocab_parallel ? 1 : 0));
    program.instructions.back().push_back({Op::kOptimizerStep, -1, 0, -1});
  }
  if (shape.schedule == Schedule::kBPipe) {
    const SimulationReport one_f_one_b = simulate(program);
    for (int lender = 0; lender < p - 1 - lender; ++lender)
      lend_stashes(program, one_f_one_b.timeline, lender, bpipe_cap(p));
  }
  if (shape.vocab_parallel) add_vocab_passes(program);
  return program;
}

}  // namespace hippo::pipeline
