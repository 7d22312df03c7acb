#include "pipeline/simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

namespace hippo::pipeline {

double Costs::of(int stage, Op op) const {
  const auto& table = by_stage.empty() ? by_op : by_stage[stage];
  return table[static_cast<int>(op)];
}

Costs Costs::uniform(double forward, double backward) {
  Costs costs;
  costs.by_op.fill(0);
  costs.by_op[static_cast<int>(Op::kForward)] = forward;
  costs.by_op[static_cast<int>(Op::kBackward)] = backward;
  return costs;
}

std::string SimulationReport::error_text() const {
  std::string text;
  for (const std::string& problem : problems) text += problem + "\n";
  for (const StuckStage& s : stuck) {
    text += "deadlock: stage " + std::to_string(s.stage) + " is stuck at instruction " +
            std::to_string(s.index) + ": " + describe(s.instruction) + "\n";
  }
  return text;
}

namespace {

bool is_compute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kOptimizerStep ||
         op == Op::kEmbedForward || op == Op::kEmbedBackward || op == Op::kVocabForward ||
         op == Op::kVocabBackward;
}

bool is_vocab(Op op) {
  return op >= Op::kEmbedForward;
}

// The order the vocabulary passes of a stage's micro-batches need (program.h): each pass once per
// micro-batch; embed forward before stage 0's forward of (mb, chunk 0), which comes after every
// shard's embedding of mb; vocab forward after the last stage's forward of (mb, last chunk) and
// before vocab backward, which comes before the last stage's backward of (mb, last chunk); embed
// backward after stage 0's backward of (mb, chunk 0); vocab and embed backwards in ascending
// micro-batch order (the gradients' sums in the unpipelined order). Returns the problems.
std::vector<std::string> check_vocab_order(const Program& program) {
  std::vector<std::string> problems;
  const int p = program.stages, m = program.microbatches, last = p - 1;
  for (int s = 0; s < p; ++s) {
    // Per micro-batch, the position in the list of each pass and of the stage's forward and
    // backward at the model's ends; -1: not yet.
    std::map<std::pair<Op, int>, int> at;
    std::map<Op, int> previous;     // the micro-batch of the last vocab / embed backward
    std::map<int, int> embeddings;  // mb -> embeddings received (stage 0)
    auto problem = [&](int index, const Instruction& ins, const std::string& what) {
      problems.push_back("stage " + std::to_string(s) + " instruction " + std::to_string(index) +
                         " (" + describe(ins) + "): " + what);
    };
    const std::vector<Instruction>& list = program.instructions[s];
    for (int i = 0; i < std::ssize(list); ++i) {
      const Instruction& ins = list[i];
      const int mb = ins.microbatch;
      const bool first_chunk = ins.chunk == 0, last_chunk = ins.chunk == program.chunks - 1;
      if (ins.op == Op::kRecvEmbedding) ++embeddings[mb];
      if (ins.op == Op::kForward && s == 0 && first_chunk &&
          (!at.count({Op::kEmbedForward, mb}) || embeddings[mb] != p - 1))
        problem(i, ins, "before every shard's embedding of the micro-batch");
      if (ins.op == Op::kBackward && s == last && last_chunk && !at.count({Op::kVocabBackward, mb}))
        problem(i, ins, "before the vocab backward of the micro-batch");
      if (ins.op == Op::kVocabForward && s == last && !at.count({Op::kForward, mb}))
        problem(i, ins, "before the forward of the micro-batch");
      if (ins.op == Op::kVocabBackward && !at.count({Op::kVocabForward, mb}))
        problem(i, ins, "before the vocab forward of the micro-batch");
      if (ins.op == Op::kEmbedBackward && s == 0 && !at.count({Op::kBackward, mb}))
        problem(i, ins, "before the backward of the micro-batch");
      if (ins.op == Op::kVocabBackward || ins.op == Op::kEmbedBackward) {
        auto [it, first] = previous.try_emplace(ins.op, mb);
        if (!first && mb <= it->second) problem(i, ins, "out of ascending micro-batch order");
        it->second = mb;
      }
      const bool end_pass = (ins.op == Op::kForward && s == last && last_chunk) ||
                            (ins.op == Op::kBackward && s == 0 && first_chunk);
      if ((ins.op >= Op::kEmbedForward && ins.op <= Op::kVocabBackward) || end_pass) {
        if (!at.emplace(std::pair{ins.op, mb}, i).second && !end_pass)
          problem(i, ins, "a second time");
      }
    }
    for (Op op : {Op::kEmbedForward, Op::kEmbedBackward, Op::kVocabForward, Op::kVocabBackward})
      for (int mb = 0; mb < m; ++mb)
        if (!at.count({op, mb}))
          problems.push_back("stage " + std::to_string(s) + " has no " + describe({op, mb, 0, -1}));
  }
  return problems;
}

int stash_delta(Op op) {
  switch (op) {
    case Op::kForward:
    case Op::kReload:
    case Op::kHold:
      return 1;
    case Op::kBackward:
    case Op::kEvict:
    case Op::kReturn:
      return -1;
    default:
      return 0;
  }
}

// Fields in range: micro-batch, chunk, peer. Returns the problem or "".
std::string check_fields(const Program& program, int stage, int index, const Instruction& ins) {
  std::string where = "stage " + std::to_string(stage) + " instruction " + std::to_string(index) +
                      " (" + describe(ins) + "): ";
  bool communicates = is_send(ins.op) || is_receive(ins.op);
  if (ins.op != Op::kOptimizerStep &&
      (ins.microbatch < 0 || ins.microbatch >= program.microbatches))
    return where + "micro-batch out of range [0, " + std::to_string(program.microbatches) + ")";
  if (ins.chunk < 0 || ins.chunk >= program.chunks)
    return where + "chunk out of range [0, " + std::to_string(program.chunks) + ")";
  if (communicates && (ins.peer < 0 || ins.peer >= program.stages))
    return where + "peer out of range [0, " + std::to_string(program.stages) + ")";
  return "";
}

struct Message {
  Instruction send;
  int stage = 0;  // the sender
  double ready = 0;
};

}  // namespace

SimulationReport simulate(const Program& program, const Costs& costs) {
  SimulationReport report;
  const int p = program.stages;
  if (p < 1 || static_cast<int>(program.instructions.size()) != p) {
    report.problems.push_back("the program has " + std::to_string(program.instructions.size()) +
                              " instruction lists for " + std::to_string(p) + " stages");
    return report;
  }
  if (!costs.by_stage.empty() && static_cast<int>(costs.by_stage.size()) != p) {
    report.problems.push_back("costs are given for " + std::to_string(costs.by_stage.size()) +
                              " stages, the program has " + std::to_string(p));
    return report;
  }
  for (int s = 0; s < p; ++s) {
    for (size_t i = 0; i < program.instructions[s].size(); ++i) {
      std::string problem = check_fields(program, s, i, program.instructions[s][i]);
      if (!problem.empty()) report.problems.push_back(problem);
    }
  }
  for (int s = 0; s < p && !program.vocab_parallel; ++s)
    for (const Instruction& ins : program.instructions[s])
      if (is_vocab(ins.op)) {
        report.problems.push_back("stage " + std::to_string(s) + ": " + describe(ins) +
                                  " in a program without vocabulary parallelism");
        break;
      }
  if (program.vocab_parallel)
    for (std::string& problem : check_vocab_order(program))
      report.problems.push_back(std::move(problem));
  if (!report.problems.empty()) return report;

  // Messages in flight per (sender, receiver, channel), in send order.
  std::map<std::tuple<int, int, Channel>, std::deque<Message>> links;
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  report.busy.assign(p, 0);
  report.peak_stash.assign(p, 0);
  report.timeline.assign(p, {});
  std::vector<int> stash(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const std::vector<Instruction>& list = program.instructions[s];
      while (next[s] < list.size()) {
        const Instruction& ins = list[next[s]];
        double start = clock[s];
        if (is_receive(ins.op)) {
          auto link = links.find({ins.peer, s, channel(ins.op)});
          if (link == links.end() || link->second.empty()) break;  // wait for the send
          Message message = link->second.front();
          link->second.pop_front();
          Instruction expected = matching_send(p, s, ins);
          if (!(message.send == expected)) {
            report.problems.push_back(
                "stage " + std::to_string(s) + " instruction " + std::to_string(next[s]) + " (" +
                describe(ins) + ") expects stage " + std::to_string(ins.peer) + "'s " +
                describe(expected) + " but receives its " + describe(message.send));
          }
          start = std::max(start, message.ready);
        }
        const double end = start + costs.of(s, ins.op);
        if (is_send(ins.op)) links[{s, ins.peer, channel(ins.op)}].push_back({ins, s, end});
        if (is_compute(ins.op)) report.busy[s] += end - start;
        stash[s] += stash_delta(ins.op);
        report.peak_stash[s] = std::max(report.peak_stash[s], stash[s]);
        report.timeline[s].push_back({ins, start, end});
        clock[s] = end;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (next[s] < program.instructions[s].size()) {
      report.deadlocked = true;
      report.stuck.push_back({s, static_cast<int>(next[s]), program.instructions[s][next[s]]});
    }
    report.makespan = std::max(report.makespan, clock[s]);
  }
  for (const auto& [key, queue] : links) {
    for (const Message& message : queue) {
      report.problems.push_back("unmatched send: stage " + std::to_string(message.stage) + "'s " +
                                describe(message.send) + " is never received");
    }
  }
  double busy = 0;
  for (double b : report.busy) busy += b;
  report.bubble_fraction = report.makespan > 0 ? 1 - busy / (p * report.makespan) : 0;
  return report;
}

}  // namespace hippo::pipeline
