// Runs a Program on a model of p devices: each stage executes its instructions in order, one at a
// time; an instruction takes its cost; a send never waits (it is buffered) and its message is
// ready when it ends; a receive waits for the matching send's message (the k-th receive of a
// channel between two stages takes the k-th send, program.h) and then takes its own cost, so the
// cost of a receive is the transfer time. The simulator checks the program (deadlock, unmatched
// or mismatched messages, bad fields, and for a vocabulary-parallel program every micro-batch's
// vocabulary passes, once per stage and in order) and times it.
//
// Bubble fraction: 1 - sum over stages of busy time / (p * makespan), where busy time is the time
// spent in forward, backward, optimizer-step and vocabulary-pass instructions. Waiting and
// communication count as bubble.
//
// Stash: the number of stashed activations resident on a stage, counted in program order: +1 at a
// forward, a reload or a hold; -1 at a backward, an evict or a return. peak_stash is its maximum
// per stage (interleaved: in (micro-batch, chunk) units, each 1/v of a stage's activations).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "pipeline/program.h"

namespace hippo::pipeline {

struct Costs {
  // Cost of each op (indexed by Op); default forward 1, backward 2, everything else 0.
  std::array<double, kOpCount> by_op{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  // Optional per-stage costs: when not empty, one array per stage, used instead of by_op.
  std::vector<std::array<double, kOpCount>> by_stage;

  double of(int stage, Op op) const;
  // Forward f and backward b on every stage, everything else free.
  static Costs uniform(double forward, double backward);
};

struct TimedInstruction {
  Instruction instruction;
  double start = 0;  // for a receive: when its message was there (waiting before is idle)
  double end = 0;
};

struct StuckStage {
  int stage = 0;
  int index = 0;            // of the instruction it cannot execute
  Instruction instruction;  // a receive whose message never comes
};

struct SimulationReport {
  std::vector<std::string> problems;  // bad fields, unmatched or mismatched messages; empty if none
  bool deadlocked = false;
  std::vector<StuckStage> stuck;  // when deadlocked: the next instruction of each unfinished stage
  double makespan = 0;
  double bubble_fraction = 0;
  std::vector<double> busy;     // [stages] time in forward, backward and optimizer step
  std::vector<int> peak_stash;  // [stages]
  std::vector<std::vector<TimedInstruction>> timeline;  // [stages] the executed instructions

  bool ok() const { return problems.empty() && !deadlocked; }
  // The problems and the stuck instructions, one per line ("" when ok()).
  std::string error_text() const;
};

SimulationReport simulate(const Program& program, const Costs& costs = Costs{});

}  // namespace hippo::pipeline
