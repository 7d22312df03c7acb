// What the master keeps for later studies (master/retention.h): the value rule, the choice under
// a budget, how many trials pass through a state, and the sizes an operator writes.
#include "master/retention.h"

#include <gtest/gtest.h>

#include "stagetree/sequence.h"

namespace hippo::master {
namespace {

constexpr double kWeek_s = 7 * 24 * 3600.0;

TEST(Retention, ValueIsStepsTimesTrialsPerByteHalvedEachWeek) {
  EXPECT_DOUBLE_EQ(retention_value({1, 1000, 500, 3, 0}), 1000.0 * 3 / 500);
  EXPECT_DOUBLE_EQ(retention_value({1, 1000, 500, 3, kWeek_s}), 1000.0 * 3 / 500 / 2);
  EXPECT_DOUBLE_EQ(retention_value({1, 1000, 500, 3, 2 * kWeek_s}), 1000.0 * 3 / 500 / 4);
  EXPECT_DOUBLE_EQ(retention_value({1, 10, 0, 1, 0}), 10.0);  // a size of 0 counts as 1 byte
  EXPECT_EQ(choose_retained({{1, 10, 0, 1, 0}}, 0), std::vector<int64_t>{});  // budget 0: none
}

TEST(Retention, KeepsTheMostValuableThatFitTheBudget) {
  // Values: a 3000, b 1500, c 1000 (bytes 100 each), d 500 (bytes 10).
  std::vector<RetentionCandidate> c = {{1, 1000, 100, 300, 0},  // 3000
                                       {2, 1000, 100, 150, 0},  // 1500
                                       {3, 1000, 100, 100, 0},  // 1000
                                       {4, 5, 10, 1000, 0}};    // 500
  EXPECT_EQ(choose_retained(c, 0), std::vector<int64_t>{});
  EXPECT_EQ(choose_retained(c, 100), std::vector<int64_t>{1});
  EXPECT_EQ(choose_retained(c, 199), (std::vector<int64_t>{1, 4}));  // b does not fit, d does
  EXPECT_EQ(choose_retained(c, 310), (std::vector<int64_t>{1, 2, 3, 4}));
  // An older state loses to an equal newer one; equal values go to the lower id.
  c = {{7, 100, 10, 1, 2 * kWeek_s}, {8, 100, 10, 1, 0}, {9, 100, 10, 1, 0}};
  EXPECT_EQ(choose_retained(c, 20), (std::vector<int64_t>{8, 9}));
}

// lr = 1 up to `diverge`, then `after`.
Hyperparams lr_until(int64_t diverge, double after) {
  return {{"lr", piecewise({{0, 1.0}, {diverge, after}})}};
}

TEST(Retention, TrialsThroughAState) {
  // Trial 0 runs 300 steps; trial 1 shares its first 100 and runs to 200; trial 2 is trial 0's
  // first 250 steps (it ends inside trial 0's upper stage).
  StageTree tree;
  tree.add_trial(0, "r", lr_until(1000, 1), 300);
  tree.add_trial(1, "r", lr_until(100, 2), 200);
  tree.add_trial(2, "r", lr_until(1000, 1), 250);
  const StageId top = tree.stage_at(0, 100), upper = tree.stage_at(0, 300);
  const auto ends = trials_through_ends(tree);
  EXPECT_EQ(trials_through(tree, ends, top, 100), 3);    // the branch point
  EXPECT_EQ(trials_through(tree, ends, top, 50), 3);     // inside the shared stage
  EXPECT_EQ(trials_through(tree, ends, upper, 250), 2);  // trials 0 and 2
  EXPECT_EQ(trials_through(tree, ends, upper, 251), 1);  // trial 0 only
  EXPECT_EQ(trials_through(tree, ends, upper, 300), 1);
  EXPECT_EQ(trials_through(tree, ends, tree.stage_at(1, 200), 200), 1);
}

TEST(Retention, SizesAsOperatorsWriteThem) {
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_EQ(parse_size("1234"), 1234);
  EXPECT_EQ(parse_size("500MB"), 500'000'000);
  EXPECT_EQ(parse_size("20GB"), 20'000'000'000);
  EXPECT_EQ(parse_size("20g"), 20'000'000'000);
  EXPECT_EQ(parse_size("1.5GiB"), 1'610'612'736);
  EXPECT_EQ(parse_size("2KiB"), 2048);
  EXPECT_EQ(parse_size("3B"), 3);
  for (const char* bad : {"", "-1", "GB", "10XB", "1e400", "nan", "1.5 GB", " 5", "20GBs", "inf"})
    EXPECT_THROW(parse_size(bad), std::invalid_argument) << bad;
  EXPECT_EQ(format_size(2147483648), "2.1 GB");
  EXPECT_EQ(format_size(999), "999 B");
}

}  // namespace
}  // namespace hippo::master
