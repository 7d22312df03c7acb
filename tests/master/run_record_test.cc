// How `hippo enqueue` finds a `hippo run` (master/run_record.h), on real files and a real socket:
// the record is found through any path to the plan while its process and socket live, and not
// after; a stale record (its process gone) is no run; a record too large, malformed, or in a
// directory that others may enter is refused, naming the file.
#include "master/run_record.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace hippo::master {
namespace {

namespace fs = std::filesystem;

class RunRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-run-record-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "home");
    fs::permissions(dir_ / "home", fs::perms::owner_all);
    setenv("HIPPO_HOME", (dir_ / "home").c_str(), 1);
    std::ofstream(plan()) << "";
    // A listening socket, as a run's master has.
    socket_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", (dir_ / "m.sock").c_str());
    ASSERT_EQ(::bind(socket_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  void TearDown() override {
    ::close(socket_);
    unsetenv("HIPPO_HOME");
    fs::remove_all(dir_);
  }
  std::string plan() const { return (dir_ / "plan.db").string(); }
  RunAddress live() const { return {"ipc://" + (dir_ / "m.sock").string(), kKey, ::getpid()}; }
  // The one record file in the runs directory.
  fs::path record_file() const { return fs::directory_iterator(dir_ / "home" / "runs")->path(); }

  static constexpr const char* kKey = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  fs::path dir_;
  int socket_ = -1;
};

TEST_F(RunRecordTest, FoundThroughAnyPathWhileTheRunLives) {
  fs::create_symlink(plan(), dir_ / "link.db");
  {
    RunRecord record(plan(), live());
    EXPECT_EQ(fs::status(dir_ / "home" / "runs").permissions() & fs::perms::all,
              fs::perms::owner_all);
    EXPECT_EQ(fs::status(record_file()).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
    for (const std::string& db : {plan(), (dir_ / "link.db").string()}) {
      std::optional<RunAddress> found = find_run(db);
      ASSERT_TRUE(found.has_value()) << db;
      EXPECT_EQ(found->address, live().address);
      EXPECT_EQ(found->master_key, kKey);
      EXPECT_EQ(found->pid, ::getpid());
    }
  }
  EXPECT_FALSE(find_run(plan()).has_value());  // removed with the run
}

TEST_F(RunRecordTest, AStaleRecordIsNoRun) {
  const pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ::waitpid(gone, nullptr, 0);
  RunAddress dead = live();
  dead.pid = gone;
  RunRecord killed(plan(), dead);
  EXPECT_FALSE(find_run(plan()).has_value());
  RunAddress no_socket = live();
  no_socket.address = "ipc://" + (dir_ / "gone.sock").string();
  RunRecord without(plan(), no_socket);  // over the stale one
  EXPECT_FALSE(find_run(plan()).has_value());
}

TEST_F(RunRecordTest, ABadRecordIsRefusedNamingIt) {
  RunRecord record(plan(), live());
  const fs::path file = record_file();
  auto refusal = [&] {
    try {
      find_run(plan());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::ofstream(file) << std::string(kMaxRunRecordBytes + 1, ' ');
  EXPECT_EQ(refusal(), file.string() + ": 4097 bytes, more than a run's record has (4096)");
  std::ofstream(file) << R"({"address": "tcp://10.0.0.1:5555", "master_key": ")" << kKey
                      << R"(", "pid": 1})";
  EXPECT_EQ(refusal(), file.string() + ": not a run's record (address, master_key or pid)");
  std::ofstream(file) << "{";
  EXPECT_EQ(refusal().rfind(file.string() + ": not a run's record: ", 0), 0u) << refusal();
  fs::permissions(dir_ / "home" / "runs", fs::perms::group_exec, fs::perm_options::add);
  EXPECT_NE(refusal().find("runs: not a directory of this user's alone"), std::string::npos)
      << refusal();
}

}  // namespace
}  // namespace hippo::master
