// The generators checked against pipeline theory by the simulator: bubble, stash, deadlock
// freedom and the backward order that keeps gradients bit-identical to an unpipelined run.
#include "pipeline/schedules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "pipeline/simulator.h"

namespace hippo::pipeline {
namespace {

Program make(int p, int m, Schedule schedule, int v = 1) {
  return generate(PipelineShape{p, m, schedule, v});
}

TEST(Schedules, OneFOneBBubbleIsExactlyTheTheoryForUniformCosts) {
  for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 32; ++m) {
        for (Schedule schedule : {Schedule::kOneFOneB, Schedule::kGPipe}) {
          SimulationReport report = simulate(make(p, m, schedule), Costs::uniform(f, b));
          ASSERT_TRUE(report.ok()) << report.error_text();
          EXPECT_EQ(report.makespan, (m + p - 1) * (f + b)) << "p=" << p << " m=" << m;
          EXPECT_NEAR(report.bubble_fraction, double(p - 1) / (m + p - 1), 1e-12)
              << schedule_name(schedule) << " p=" << p << " m=" << m << " f=" << f;
        }
      }
    }
  }
}

TEST(Schedules, OneFOneBStashesMinOfStagesLeftAndMicrobatches) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      SimulationReport one_f_one_b = simulate(make(p, m, Schedule::kOneFOneB));
      SimulationReport gpipe = simulate(make(p, m, Schedule::kGPipe));
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(one_f_one_b.peak_stash[s], std::min(p - s, m)) << "p=" << p << " m=" << m;
        EXPECT_EQ(gpipe.peak_stash[s], m);
      }
    }
  }
}

// Each chunk costs 1/v of a stage: forward 1 and backward 2 per chunk against v and 2v for the
// whole stage under 1F1B. The idle time of every device is divided by v.
TEST(Schedules, InterleavingDividesTheBubbleByChunks) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = p; m <= 32; m += p) {
      for (int v = 2; v <= 4; ++v) {
        SimulationReport plain =
            simulate(make(p, m, Schedule::kOneFOneB), Costs::uniform(v, 2 * v));
        SimulationReport interleaved =
            simulate(make(p, m, Schedule::kInterleaved, v), Costs::uniform(1, 2));
        ASSERT_TRUE(interleaved.ok()) << interleaved.error_text();
        const double idle_plain = plain.makespan * p - 3.0 * v * m * p;
        const double idle_interleaved = interleaved.makespan * p - 3.0 * v * m * p;
        EXPECT_EQ(idle_interleaved * v, idle_plain) << "p=" << p << " m=" << m << " v=" << v;
        EXPECT_NEAR(interleaved.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-12);
      }
    }
  }
}

TEST(Schedules, BPipeCapsEveryStage) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      Program program = make(p, m, Schedule::kBPipe);
      SimulationReport report = simulate(program);
      ASSERT_TRUE(report.ok()) << "p=" << p << " m=" << m << "\n" << report.error_text();
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(report.peak_stash[s], bpipe_cap(p)) << "p=" << p << " m=" << m << " s=" << s;
      }
      // Lending costs no time when transfers are free: the partner takes and gives back the
      // stashes where it would not wait.
      EXPECT_EQ(report.makespan, simulate(make(p, m, Schedule::kOneFOneB)).makespan);
      // It lends exactly when 1F1B would exceed the cap.
      bool lends = std::any_of(program.instructions[0].begin(), program.instructions[0].end(),
                               [](const Instruction& i) { return i.op == Op::kEvict; });
      EXPECT_EQ(lends, std::min(p, m) > bpipe_cap(p)) << "p=" << p << " m=" << m;
    }
  }
  EXPECT_EQ(bpipe_cap(8), 5);
  EXPECT_EQ(bpipe_cap(7), 4);
}

// Every generated program runs to the end with every message matched, computes each forward and
// backward of each (micro-batch, pipeline position) once, and runs the backwards of each chunk in
// ascending micro-batch order, so gradients accumulate as in an unpipelined run.
TEST(Schedules, EveryGeneratedProgramIsDeadlockFreeAndComplete) {
  int programs = 0;
  for (Schedule schedule :
       {Schedule::kGPipe, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kBPipe}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 32; ++m) {
        for (int v = 1; v <= (schedule == Schedule::kInterleaved ? 4 : 1); ++v) {
          PipelineShape shape{p, m, schedule, v};
          if (!check_shape(shape).empty()) continue;
          Program program = generate(shape);
          SimulationReport report = simulate(program);
          ASSERT_TRUE(report.ok())
              << schedule_name(schedule) << " p=" << p << " m=" << m << " v=" << v << "\n"
              << report.error_text();
          std::map<std::pair<int, int>, int> forwards, backwards;  // (mb, chunk) -> count
          for (int s = 0; s < p; ++s) {
            std::map<int, int> last_backward;  // chunk -> last micro-batch
            for (const Instruction& ins : program.instructions[s]) {
              if (ins.op == Op::kForward) ++forwards[{ins.microbatch, ins.chunk * p + s}];
              if (ins.op != Op::kBackward) continue;
              ++backwards[{ins.microbatch, ins.chunk * p + s}];
              auto last = last_backward.find(ins.chunk);
              if (last != last_backward.end()) {
                EXPECT_LT(last->second, ins.microbatch);
              }
              last_backward[ins.chunk] = ins.microbatch;
            }
            EXPECT_EQ(program.instructions[s].back().op, Op::kOptimizerStep);
          }
          EXPECT_EQ(forwards.size(), size_t(m) * p * v);
          EXPECT_EQ(backwards.size(), size_t(m) * p * v);
          for (auto& [key, count] : forwards) EXPECT_EQ(count, 1);
          for (auto& [key, count] : backwards) EXPECT_EQ(count, 1);
          ++programs;
        }
      }
    }
  }
  EXPECT_GT(programs, 3 * 8 * 32);
}

TEST(Schedules, BadShapesAreRefusedWithTheField) {
  EXPECT_EQ(check_shape({0, 4, Schedule::kOneFOneB, 1}),
            "stages: expected an integer from 1 to 256, got 0");
  EXPECT_NE(check_shape({2, 0, Schedule::kGPipe, 1}).find("microbatches"), std::string::npos);
  EXPECT_NE(check_shape({4, 6, Schedule::kInterleaved, 2}).find("multiple of stages"),
            std::string::npos);
  EXPECT_NE(check_shape({4, 8, Schedule::kOneFOneB, 2}).find("chunks"), std::string::npos);
  EXPECT_THROW(generate({4, 6, Schedule::kInterleaved, 2}), std::invalid_argument);
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::kOneFOneB);
  EXPECT_EQ(parse_schedule("zigzag"), std::nullopt);
  for (PipelineShape bad : {PipelineShape{1, 4, Schedule::kOneFOneB, 1, true},
                            PipelineShape{4, 4, Schedule::kGPipe, 1, true},
                            PipelineShape{4, 4, Schedule::kBPipe, 1, true}})
    EXPECT_EQ(check_shape(bad).rfind("vocab_parallel: needs at least 2 stages", 0), 0u);
}

bool is_vocab_op(Op op) {
  return op >= Op::kEmbedForward;
}

// Costs where the vocabulary passes and every transfer take time, differently per stage.
Costs vocab_costs(int p) {
  Costs costs;
  for (int s = 0; s < p; ++s) {
    std::array<double, kOpCount> c{};
    c.fill(0.05);
    c[int(Op::kForward)] = 1 + 0.1 * s;
    c[int(Op::kBackward)] = 2;
    c[int(Op::kVocabForward)] = 0.3;
    c[int(Op::kVocabBackward)] = 0.6;
    c[int(Op::kEmbedForward)] = c[int(Op::kEmbedBackward)] = 0.02 * (s + 1);
    costs.by_stage.push_back(c);
  }
  return costs;
}

// Vocabulary parallelism: 1f1b and interleaved programs with the passes run to the end under
// default and uneven costs (no deadlock, every message matched, every micro-batch's passes once
// per stage and in order: the simulator's checks); their forwards and backwards are those of the
// plain schedule with one more warm-up forward per stage (as if one stage followed the last).
TEST(Schedules, VocabParallelProgramsAreDeadlockFreeAndInOrder) {
  int programs = 0;
  for (Schedule schedule : {Schedule::kOneFOneB, Schedule::kInterleaved}) {
    for (int p = 2; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= (schedule == Schedule::kInterleaved ? 3 : 1); ++v) {
          PipelineShape shape{p, m, schedule, v, true};
          if (!check_shape(shape).empty()) continue;
          const Program program = generate(shape);
          SCOPED_TRACE(std::string(schedule_name(schedule)) + " p=" + std::to_string(p) +
                       " m=" + std::to_string(m) + " v=" + std::to_string(v));
          EXPECT_TRUE(program.vocab_parallel);
          for (const Costs& costs : {Costs{}, vocab_costs(p)}) {
            const SimulationReport report = simulate(program, costs);
            ASSERT_TRUE(report.ok()) << report.error_text();
          }
          shape.vocab_parallel = false;
          const Program plain = generate(shape);
          for (int s = 0; s < p; ++s) {
            std::vector<Instruction> rest, computed, plain_computed;
            for (const Instruction& ins : program.instructions[s]) {
              if (!is_vocab_op(ins.op)) rest.push_back(ins);
              if (ins.op == Op::kForward || ins.op == Op::kBackward) computed.push_back(ins);
            }
            for (const Instruction& ins : plain.instructions[s])
              if (ins.op == Op::kForward || ins.op == Op::kBackward) plain_computed.push_back(ins);
            EXPECT_EQ(rest.size(), plain.instructions[s].size());
            // The same forwards and backwards; the backwards in the same (ascending) order.
            auto backwards = [](const std::vector<Instruction>& list) {
              std::vector<Instruction> out;
              for (const Instruction& ins : list)
                if (ins.op == Op::kBackward) out.push_back(ins);
              return out;
            };
            EXPECT_EQ(backwards(computed), backwards(plain_computed));
            EXPECT_EQ(computed.size(), plain_computed.size());
          }
          ++programs;
        }
      }
    }
  }
  EXPECT_GT(programs, 7 * 16);
}

// The simulator refuses vocabulary passes out of order, missing, repeated, or in a plain program.
TEST(Schedules, MisplacedVocabPassesAreReported) {
  const Program good = generate({2, 3, Schedule::kOneFOneB, 1, true});
  auto problems = [](const Program& program) { return simulate(program).error_text(); };
  ASSERT_EQ(problems(good), "");
  auto find = [](std::vector<Instruction>& list, Op op, int mb) {
    return std::find(list.begin(), list.end(), Instruction{op, mb, 0, -1});
  };
  Program swapped = good;  // the vocab backwards of micro-batches 0 and 1 on stage 0
  std::iter_swap(find(swapped.instructions[0], Op::kVocabBackward, 0),
                 find(swapped.instructions[0], Op::kVocabBackward, 1));
  EXPECT_NE(problems(swapped).find("stage 0 instruction"), std::string::npos);
  EXPECT_NE(problems(swapped).find("out of ascending micro-batch order"), std::string::npos);
  Program missing = good;
  missing.instructions[1].erase(find(missing.instructions[1], Op::kEmbedForward, 2));
  EXPECT_NE(problems(missing).find("stage 1 has no embed forward mb 2"), std::string::npos);
  Program early = good;  // stage 0's forward of micro-batch 0 before its shards' embeddings
  auto& first = early.instructions[0];
  first.insert(first.begin(), Instruction{Op::kForward, 0, 0, -1});
  EXPECT_NE(problems(early).find("before every shard's embedding"), std::string::npos);
  Program plain = good;
  plain.vocab_parallel = false;
  EXPECT_NE(problems(plain).find("in a program without vocabulary parallelism"), std::string::npos);
}

}  // namespace
}  // namespace hippo::pipeline
