// The worker pool's decisions without sockets (master/worker_pool.h): who gets work, who is lost,
// how failed attempts at a stage wait and are bounded, and which jobs nothing needs any more.
// (Names bound to keys and claims: access_test.cc.)
#include "master/worker_pool.h"

#include <gtest/gtest.h>

#include <thread>

namespace hippo::master {
namespace {

protocol::Hello hello(const std::string& name) {
  protocol::Hello h;
  h.name = name;
  h.device = "cpu";
  return h;
}

const protocol::PeerIdentity kKey{"k", protocol::kWorkerRole, "w"};

TEST(WorkerPool, AWorkerThatFailsForItsOwnReasonsIsSetAsideThenOnProbation) {
  WorkerPool pool;
  ConnectedWorker& w = pool.join("p", kKey, hello("w"));
  pool.join("q", kKey, hello("other"));  // another worker may take the work meanwhile
  EXPECT_EQ(pool.unavailable(w), "");
  EXPECT_FALSE(pool.failed_on_worker(w, "disk full"));
  EXPECT_FALSE(pool.failed_on_worker(w, "disk full"));
  EXPECT_TRUE(pool.failed_on_worker(w, "disk full"));  // the third in a row
  EXPECT_EQ(pool.unavailable(w), "failed 3 jobs in a row (the last: disk full)");
  EXPECT_FALSE(pool.failed_on_worker(w, "disk full"));     // already set aside
  EXPECT_LT(pool.next_retry(), Clock::time_point::max());  // when its probation begins
  // The wait over, it gets a job on probation; failing that one sets it aside again, for longer.
  w.set_aside_until = Clock::now();
  EXPECT_EQ(pool.unavailable(w), "");
  EXPECT_TRUE(pool.failed_on_worker(w, "disk full"));
  EXPECT_EQ(w.times_set_aside, 2);
  EXPECT_GT(w.set_aside_until - Clock::now(), std::chrono::seconds(45));  // 60 s the second time
  // A job it did clears it all.
  pool.done_on_worker(w);
  EXPECT_EQ(pool.unavailable(w), "");
  EXPECT_EQ(w.failures_in_a_row, 0);
}

// The last worker that may work is never set aside: its failures may be the study's own (a
// trainer that always crashes), which the stages' attempts bound; a wait would only delay that.
TEST(WorkerPool, TheLastWorkerThatMayWorkIsNotSetAside) {
  WorkerPool pool;
  ConnectedWorker& w = pool.join("p", kKey, hello("w"));
  for (int i = 0; i < 2 * kWorkerFailuresInARow; ++i)
    EXPECT_FALSE(pool.failed_on_worker(w, "exited with status 3"));
  EXPECT_EQ(pool.unavailable(w), "");
  ConnectedWorker& other = pool.join("q", kKey, hello("other"));
  EXPECT_TRUE(pool.failed_on_worker(w, "exited with status 3"));  // now another may work
  for (int i = 0; i < kWorkerFailuresInARow; ++i)
    EXPECT_FALSE(pool.failed_on_worker(other, "exited with status 3"));
  EXPECT_EQ(pool.unavailable(other), "");
}

TEST(WorkerPool, AWorkerThatSaysItCannotWorkGetsNoneUntilItSaysItRecovered) {
  WorkerPool pool;
  ConnectedWorker& w = pool.join("p", kKey, hello("w"));
  for (int i = 0; i < kWorkerFailuresInARow; ++i) pool.failed_on_worker(w, "EFBIG");
  pool.set_fault(w, "its checkpoint directory failed: File too large");
  EXPECT_EQ(pool.unavailable(w), "its checkpoint directory failed: File too large");
  pool.set_fault(w, "");  // its probe wrote: recovered, and no longer set aside either
  EXPECT_EQ(pool.unavailable(w), "");
  w.draining = true;
  EXPECT_EQ(pool.unavailable(w), "draining");
}

TEST(WorkerPool, FailedAndLostAttemptsAtAStageWaitLongerEachTimeAndAreCounted) {
  EXPECT_EQ(stage_retry_delay(1), 1);
  EXPECT_EQ(stage_retry_delay(2), 2);
  EXPECT_EQ(stage_retry_delay(4), 8);
  EXPECT_EQ(stage_retry_delay(20), 30);
  WorkerPool pool;
  pool.join("a", kKey, hello("a"));
  pool.join("b", kKey, hello("b"));
  EXPECT_FALSE(pool.backing_off(7));
  EXPECT_EQ(pool.next_retry(), Clock::time_point::max());
  pool.add_storage_failure(7, "a");
  pool.add_lost_attempt(7, "a");
  EXPECT_EQ(pool.storage_failures(7), 1);
  EXPECT_EQ(pool.lost_attempts(7), 1);
  EXPECT_TRUE(pool.backing_off(7));
  EXPECT_FALSE(pool.backing_off(8));
  EXPECT_GT(pool.next_retry(), Clock::now() + std::chrono::milliseconds(1500));  // 2 s: the 2nd
  // It goes to the other worker first.
  EXPECT_TRUE(pool.should_avoid(7, *pool.find("a")));
  EXPECT_FALSE(pool.should_avoid(7, *pool.find("b")));
  // Progress clears it.
  pool.clear_storage_failures(7);
  EXPECT_FALSE(pool.backing_off(7));
  EXPECT_EQ(pool.lost_attempts(7), 0);
}

TEST(WorkerPool, SilentWorkersAreLostWithTheirJobs) {
  WorkerPool pool;
  ConnectedWorker& a = pool.join("a", kKey, hello("a"));
  pool.join("b", kKey, hello("b"));
  RunningJob job;
  job.representative = 3;
  job.order.id = pool.next_job_id();
  pool.start(a, job);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  pool.find("b")->last_seen = Clock::now();
  EXPECT_TRUE(pool.expiry_due(0.02));
  // Found silent: the master's edit removes it (its job's end first).
  const std::vector<std::string> lost = pool.silent(0.02);
  EXPECT_EQ(lost, std::vector<std::string>{"a"});
  EXPECT_EQ(pool.find("a")->job, 1);
  pool.end_job(1, std::nullopt);
  pool.remove("a");
  EXPECT_TRUE(pool.jobs().empty());
  EXPECT_EQ(pool.size(), 1);
}

TEST(WorkerPool, JobsThatNothingNeedsAreFoundUntilMarked) {
  WorkerPool pool;
  RunningJob needed, unneeded;
  needed.representative = 1;
  unneeded.representative = 2;
  needed.order.id = 1;
  unneeded.order.id = 2;
  pool.start(pool.join("a", kKey, hello("a")), needed);
  pool.start(pool.join("b", kKey, hello("b")), unneeded);
  auto is_needed = [](const RunningJob& job) { return job.representative == 1; };
  EXPECT_EQ(pool.orphans(is_needed), std::vector<int64_t>{2});
  pool.jobs().at(2).abandoned = true;            // the master's edit (AbandonJob)
  EXPECT_TRUE(pool.orphans(is_needed).empty());  // told once
}

}  // namespace
}  // namespace hippo::master
