// Jobs as the master closes them (master/jobs.h), without sockets or processes: whether a running
// job still makes what an open trial needs (Master::abandon_orphan_jobs abandons it when not).
#include "master/jobs.h"

#include <gtest/gtest.h>

namespace hippo::master {
namespace {

Hyperparams lr(double value) {
  return {{"lr", piecewise({{0, value}})}};
}

// One trial of 300 steps, one stage; a job trains it from 0 to 300 with a snapshot at its end.
struct OneStage {
  StageTree tree;
  RunningJob job;
  std::unordered_map<StageId, int64_t> needed;
  OneStage() {
    tree.add_trial(0, "r", lr(1), 300);
    job.representative = 0;
    job.order.from = 0;
    job.order.to = 300;
    job.order.snapshots.push_back({.step = 300, .state = 1, .file = ""});
    needed[tree.stage_at(0, 300)] = 300;
  }
};

TEST(Jobs, AJobIsNeededUntilItAnnouncesTheStateANeededEndWaitsFor) {
  OneStage f;
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  f.job.progress_step = 150;
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  // Its metrics at 300 came (or a heartbeat said it got there): the worker is writing the
  // checkpoint at 300, which it has not announced. Abandoned now, that state would be lost and its
  // 300 steps trained again (the shared policy's steps_executed one job over steps_unique).
  f.job.progress_step = 300;
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  // Announced: nothing it makes is needed any more.
  f.job.reported_step = 300;
  EXPECT_FALSE(trains_needed(f.job, f.tree, f.needed));
}

TEST(Jobs, AJobPastWhatIsNeededWithNoStateToAnnounceThereIsNotNeeded) {
  OneStage f;
  const StageId stage = f.tree.stage_at(0, 300);
  // The open trials need the stage only up to 100 now (the one that needed more stopped), and
  // the job has no snapshot there: past 100, nothing it makes is needed.
  f.needed[stage] = 100;
  f.job.progress_step = 60;
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  f.job.progress_step = 120;
  EXPECT_FALSE(trains_needed(f.job, f.tree, f.needed));
  // With a snapshot ordered at 100 (a trial ends there), it is needed until it announces it.
  f.job.order.snapshots.insert(f.job.order.snapshots.begin(),
                               {.step = 100, .state = 2, .file = ""});
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  f.job.reported_step = 100;
  EXPECT_FALSE(trains_needed(f.job, f.tree, f.needed));
  // Nothing needed at all.
  f.job.reported_step = 0;
  f.needed.clear();
  EXPECT_FALSE(trains_needed(f.job, f.tree, f.needed));
}

// A job over a stage that split while it trained: the lower stage's end (where a new trial
// branches) is needed; the upper part is the job's own trial's.
TEST(Jobs, AStageSplitUnderAJobKeepsItNeededForTheLowerStageOrTheUpper) {
  OneStage f;
  Change change = f.tree.add_trial(1, "r", {{"lr", piecewise({{0, 1.0}, {100, 2.0}})}}, 200);
  ASSERT_EQ(change.splits.size(), 1u);
  const StageId lower = f.tree.stage_at(0, 100), upper = f.tree.stage_at(0, 300);
  f.job.order.snapshots.insert(f.job.order.snapshots.begin(),
                               {.step = 100, .state = 2, .file = ""});
  f.needed = {{lower, 100}, {upper, 300}};
  f.job.progress_step = 100;
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  // Trial 0 stopped: only the lower stage is needed, and the job is writing its state at 100.
  f.needed.erase(upper);
  EXPECT_TRUE(trains_needed(f.job, f.tree, f.needed));
  f.job.reported_step = 100;
  EXPECT_FALSE(trains_needed(f.job, f.tree, f.needed));
}

}  // namespace
}  // namespace hippo::master
