// The simulator on hand-made programs: what it reports for broken ones.
#include "pipeline/simulator.h"

#include <gtest/gtest.h>

namespace hippo::pipeline {
namespace {

Program two_stages(std::vector<Instruction> first, std::vector<Instruction> second) {
  return Program{"hand-made", 2, 2, 1, {std::move(first), std::move(second)}};
}

TEST(Simulator, ReportsADeadlockWithTheStuckInstructionOfEachStage) {
  // Each stage waits for the other's gradient before sending anything.
  Program program = two_stages(
      {{Op::kRecvGradient, 0, 0, 1}, {Op::kForward, 0, 0, -1}, {Op::kSendActivation, 0, 0, 1}},
      {{Op::kForward, 1, 0, -1}, {Op::kRecvActivation, 0, 0, 0}, {Op::kSendGradient, 0, 0, 0}});
  SimulationReport report = simulate(program);
  EXPECT_TRUE(report.deadlocked);
  EXPECT_FALSE(report.ok());
  ASSERT_EQ(report.stuck.size(), 2u);
  EXPECT_EQ(report.stuck[0].stage, 0);
  EXPECT_EQ(report.stuck[0].index, 0);
  EXPECT_EQ(report.stuck[1].stage, 1);
  EXPECT_EQ(report.stuck[1].index, 1);
  EXPECT_EQ(report.error_text(),
            "deadlock: stage 0 is stuck at instruction 0: receive gradient mb 0 from stage 1\n"
            "deadlock: stage 1 is stuck at instruction 1: receive activation mb 0 from stage 0\n");
}

TEST(Simulator, ReportsAnUnmatchedSend) {
  Program program = two_stages({{Op::kForward, 0, 0, -1}, {Op::kSendActivation, 0, 0, 1}},
                               {{Op::kForward, 0, 0, -1}});
  SimulationReport report = simulate(program);
  EXPECT_FALSE(report.deadlocked);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_EQ(report.problems[0],
            "unmatched send: stage 0's send activation mb 0 to stage 1 is never received");
}

TEST(Simulator, ReportsMessagesReceivedInAnotherOrderThanSent) {
  Program program = two_stages({{Op::kSendActivation, 0, 0, 1}, {Op::kSendActivation, 1, 0, 1}},
                               {{Op::kRecvActivation, 1, 0, 0}, {Op::kRecvActivation, 0, 0, 0}});
  SimulationReport report = simulate(program);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_EQ(report.problems[0],
            "stage 1 instruction 0 (receive activation mb 1 from stage 0) expects stage 0's send "
            "activation mb 1 to stage 1 but receives its send activation mb 0 to stage 1");
}

TEST(Simulator, ReportsFieldsOutOfRange) {
  Program program = two_stages({{Op::kForward, 5, 0, -1}}, {{Op::kSendGradient, 0, 0, 7}});
  SimulationReport report = simulate(program);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_EQ(report.problems[0],
            "stage 0 instruction 0 (forward mb 5): micro-batch out of range [0, 2)");
  EXPECT_EQ(report.problems[1],
            "stage 1 instruction 0 (send gradient mb 0 to stage 7): peer out of range [0, 2)");
}

// A receive waits for its message; the transfer time is the receive's cost.
TEST(Simulator, TimesWaitsAndTransfers) {
  Program program = two_stages({{Op::kForward, 0, 0, -1}, {Op::kSendActivation, 0, 0, 1}},
                               {{Op::kRecvActivation, 0, 0, 0}, {Op::kForward, 0, 0, -1}});
  Costs costs = Costs::uniform(1, 2);
  costs.by_stage = {costs.by_op, costs.by_op};
  costs.by_stage[1][static_cast<int>(Op::kRecvActivation)] = 0.5;
  costs.by_stage[1][static_cast<int>(Op::kForward)] = 4;
  SimulationReport report = simulate(program, costs);
  ASSERT_TRUE(report.ok()) << report.error_text();
  EXPECT_EQ(report.makespan, 5.5);
  EXPECT_EQ(report.timeline[1][1].start, 1.5);
  EXPECT_NEAR(report.bubble_fraction, 1 - 5.0 / 11.0, 1e-12);
  EXPECT_EQ(report.peak_stash, (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace hippo::pipeline
