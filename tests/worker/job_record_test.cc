// The record of a worker's latest job in its checkpoint directory (worker/job_record.h): a slot per
// worker sharing the directory, the file a worker started anew reads, and files that are not a
// record (planted, truncated, forged), which are refused and removed.
#include "worker/job_record.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace hippo::worker {
namespace {

namespace fs = std::filesystem;

class JobRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-record-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string slot(int n) const {
    return (dir_ / (".hippo-last-job." + std::to_string(n))).string();
  }

  // Job 5 of trial 2, steps [10, 30), that wrote a snapshot at 20 and measured step 20.
  static void run_a_job(JobRecord& r, bool to_the_end) {
    protocol::Job job;
    job.id = 5;
    job.trial = 2;
    job.from = 10;
    job.to = 30;
    r.start(job, "0123456789abcdef");
    r.metric(20, {{"loss", 0.5}});
    r.snapshot({.job = 5,
                .step = 20,
                .state = 9,
                .file = "state-0123456789abcdef-9.ckpt",
                .bytes = 100,
                .checksum = std::string(64, 'c')});
    r.progress(25);
    r.end(to_the_end ? 30 : 25, to_the_end, false);
  }

  fs::path dir_;
};

TEST_F(JobRecords, AWorkerStartedAnewReadsTheRecordItsSlotHolds) {
  protocol::DroppedJob written;
  {
    JobRecord first(dir_.string());
    EXPECT_EQ(first.path(), slot(0));
    EXPECT_FALSE(first.get());
    run_a_job(first, true);
    written = *first.get();
  }
  EXPECT_EQ(written.reached, 30);
  EXPECT_EQ(written.reported, 20);
  EXPECT_TRUE(written.done);
  ASSERT_EQ(written.snapshots.size(), 1u);
  ASSERT_EQ(written.metrics.size(), 1u);
  struct stat st {};
  ASSERT_EQ(stat(slot(0).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  JobRecord again(dir_.string());  // the slot is free again: the first one's process ended
  EXPECT_EQ(again.path(), slot(0));
  ASSERT_TRUE(again.get());
  EXPECT_EQ(*again.get(), written);
  again.heard();
  EXPECT_FALSE(again.get());
  EXPECT_FALSE(fs::exists(slot(0)));
}

// In a directory given to a group (its setgid bit), the group reads the record, as it reads the
// checkpoints (protocol/file_modes.h).
TEST_F(JobRecords, ADirectorySharedWithAGroupSharesTheRecord) {
  ASSERT_EQ(chmod(dir_.c_str(), 02770), 0);
  JobRecord r(dir_.string());
  run_a_job(r, true);
  struct stat st {};
  ASSERT_EQ(stat(slot(0).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// Workers that share a directory take a slot each while they live; a slot whose lock name holds
// something planted (a symlink, a directory) is passed over, never followed.
TEST_F(JobRecords, WorkersSharingADirectoryTakeASlotEach) {
  fs::create_symlink("/etc/passwd", slot(1) + ".lock");
  fs::create_directory(slot(2) + ".lock");
  auto a = std::make_unique<JobRecord>(dir_.string());
  JobRecord b(dir_.string());
  EXPECT_EQ(a->path(), slot(0));
  EXPECT_EQ(b.path(), slot(3));
  run_a_job(*a, false);
  run_a_job(b, true);
  a.reset();  // its process ended mid-job
  JobRecord c(dir_.string());
  ASSERT_EQ(c.path(), slot(0));
  ASSERT_TRUE(c.get());
  EXPECT_FALSE(c.get()->done);
  EXPECT_EQ(c.get()->reached, 25);
  EXPECT_TRUE(fs::is_symlink(slot(1) + ".lock"));
}

// What is not a record is logged, removed and ignored: the worker starts without one.
TEST_F(JobRecords, AFileThatIsNotARecordIsRefusedAndRemoved) {
  auto refused = [&](const std::function<void()>& plant) {
    plant();
    JobRecord r(dir_.string());
    EXPECT_FALSE(r.get());
    EXPECT_FALSE(fs::exists(fs::symlink_status(slot(0))));
  };
  refused([&] { std::ofstream(slot(0)) << "{\"job\": 5, \"trial\": 2, \"from\""; });  // cut short
  refused([&] { std::ofstream(slot(0)) << std::string(100000, '['); });               // too deep
  refused([&] {  // steps out of the job's bounds
    std::ofstream(slot(0)) << R"({"job": 5, "trial": 2, "from": 10, "to": 30, "reported": 20,
                                  "reached": 40, "incarnation": "0123456789abcdef"})";
  });
  refused([&] { fs::resize_file((std::ofstream(slot(0)), slot(0)), (16 << 20) + 1); });  // big
  refused([&] { fs::create_symlink("/etc/passwd", slot(0)); });
  refused([&] { ASSERT_EQ(mkfifo(slot(0).c_str(), 0600), 0); });
}

}  // namespace
}  // namespace hippo::worker
