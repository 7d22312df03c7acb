// Issue 29, parts 5 and 8, as attacks on real processes: a flood of TCP connections that never
// finish their handshake against the master (its owner's queries must still be answered), slow
// request heads against the dashboard (a reader must still be served), and the modes of the files
// a real run leaves (the plan, its WAL, checkpoint directories and files, .hippo-storage: private
// unless their directory is shared with a group by its setgid bit).
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <regex>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

using namespace std::chrono_literals;

// The connections of the flood: enough that more than the 1,024 descriptors a process has by
// default get accepted within seconds (the kernel holds back part of a burst, and 1,100 stayed
// under the limit on a 2-core VM), past which the master used to stop accepting and spin.
constexpr int kFloodConnections = 2500;
// From as many loopback addresses: about 78 from each, near the bound of 64 per address, so that
// the bound on all of them together (256) is the one that drops them (without it, nothing is
// dropped before the master's 1,024 descriptors are spent: the test fails).
constexpr int kFloodSources = 32;
// How long the owner queries during the flood: the held-back connections come in meanwhile.
constexpr auto kFloodWindow = 8s;
// The limit of open files the master starts with, as on a default Linux install.
constexpr rlim_t kDefaultOpenFiles = 1024;
// How long the owner's query may take during the flood (it took about 15 s before).
constexpr double kQueryBound_s = kAddressSanitized ? 6.0 : 3.0;
// The dashboard's slow clients, and how soon a legitimate reader's request must be answered.
constexpr int kSlowClients = 100;
constexpr auto kAnswerBound = 1s;
constexpr int kReaderRequests = 20;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Raises this process's soft limit of open files to at least `wanted` (the flood's connections).
void allow_open_files(rlim_t wanted) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(limit.rlim_max, std::max(wanted, limit.rlim_cur));
  if (limit.rlim_max < wanted) limit.rlim_max = limit.rlim_cur = wanted;  // root may raise it
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0) << "cannot open " << wanted << " files";
}

// A TCP connection to the loopback's `port` from 127.0.0.`source` that never blocks: -1 when it
// could not be made.
int connect_without_waiting(int port, int source) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in from = loopback(0);
  from.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    close(fd);
    return -1;
  }
  sockaddr_in a = loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// CPU seconds (user and system) a process has used.
double cpu_seconds(pid_t pid) {
  std::istringstream stat(read_file("/proc/" + std::to_string(pid) + "/stat"));
  std::string field;
  // Fields 14 and 15 (utime, stime), in clock ticks; the name (field 2) has no spaces here.
  double ticks = 0;
  for (int i = 1; i <= 15 && stat >> field; ++i)
    if (i >= 14) ticks += std::stod(field);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string mode_of(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return "missing";
  char text[8];
  std::snprintf(text, sizeof text, "%04o", st.st_mode & 07777);
  return text;
}

class Guard : public E2ETest {
 protected:
  void SetUp() override {
    E2ETest::SetUp();
    umask(022);  // the usual one: what hippo makes must be private all the same
  }
  std::string log_path(pid_t pid) const { return path("process-" + std::to_string(pid) + ".log"); }

  // An empty plan at `db`: a master started on it and stopped.
  void make_plan(const std::string& db) {
    pid_t m = spawn({kHippo, "--db", path(db), "master", "--bind",
                     "tcp://127.0.0.1:" + std::to_string(free_port())});
    ASSERT_TRUE(appears(log_path(m), "listening on")) << read_file(log_path(m));
    kill(m, SIGTERM);
    ASSERT_GE(exit_status_within(m, 30), 0);
  }
};

// Finding: 1,100 plain TCP connections without keys (anyone on the network, with --auth's
// tcp://*) kept the owner's own `workers` query unanswered for about 15 s while the master spun
// at 100% of a core: past its 1,024 descriptors it could accept nothing. Now it raises its limit
// of open files, and drops the oldest connections that have not sent a message beyond 64 per
// address (256 in all), so the owner's new connection, which speaks at once, gets through.
TEST_F(Guard, OwnerIsAnsweredDuringAConnectionFlood) {
  allow_open_files(kFloodConnections + 256);
  const int port = free_port();
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  // `ulimit -n 1024`: soft and hard, so that the master cannot raise its limit either and its
  // bounds on silent connections alone must keep descriptors free.
  pid_t master = spawn({kHippo, "--db", path("plan.db"), "master", "--bind", address}, [] {
    const rlimit limit{kDefaultOpenFiles, kDefaultOpenFiles};
    setrlimit(RLIMIT_NOFILE, &limit);
  });
  ASSERT_TRUE(appears(log_path(master), "listening on")) << read_file(log_path(master));
  const std::string query = kHippo + " --master " + address + " --format json workers";
  ASSERT_EQ(sh(query + " >/dev/null 2>&1").status, 0) << "no answer before the flood";

  std::vector<int> flood;
  for (int i = 0; i < kFloodConnections; ++i)
    if (int fd = connect_without_waiting(port, 2 + i % kFloodSources); fd >= 0) flood.push_back(fd);
  ASSERT_EQ(static_cast<int>(flood.size()), kFloodConnections);
  std::this_thread::sleep_for(500ms);  // the master meets the flood

  const double cpu_before = cpu_seconds(master);
  const auto start = Clock::now();
  double slowest = 0;
  int failed = 0;
  while (Clock::now() - start < kFloodWindow) {
    const auto asked = Clock::now();
    failed += sh("timeout 20 " + query + " >/dev/null 2>&1").status != 0;
    slowest = std::max(slowest, seconds_since(asked));
    std::this_thread::sleep_for(500ms);
  }
  const double cpu_share = (cpu_seconds(master) - cpu_before) / seconds_since(start);
  std::printf(
      "flood of %d connections from %d addresses: the slowest `hippo workers` took %.2f s, %d "
      "failed; the master used %.0f%% of a core\n",
      kFloodConnections, kFloodSources, slowest, failed, 100 * cpu_share);
  for (int fd : flood) close(fd);
  EXPECT_EQ(failed, 0);
  EXPECT_LT(slowest, kQueryBound_s);
  EXPECT_LT(cpu_share, 0.5);
  EXPECT_NE(read_file(log_path(master)).find("that had not sent a message"), std::string::npos)
      << read_file(log_path(master));
}

// The master raises its soft limit of open files to the hard limit at start (a flood's
// connections then cost it no descriptors it needs): started with 256 of a hard 4,096, it runs
// with 4,096.
TEST_F(Guard, TheMasterRaisesItsOpenFileLimitToTheHardLimit) {
  pid_t master = spawn({kHippo, "--db", path("plan.db"), "master", "--bind",
                        "tcp://127.0.0.1:" + std::to_string(free_port())},
                       [] {
                         const rlimit limit{256, 4096};
                         setrlimit(RLIMIT_NOFILE, &limit);
                       });
  ASSERT_TRUE(appears(log_path(master), "listening on")) << read_file(log_path(master));
  const std::string limits = read_file("/proc/" + std::to_string(master) + "/limits");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(limits, m, std::regex(R"(Max open files\s+(\d+)\s+(\d+))")))
      << limits;
  EXPECT_EQ(m[1], "4096") << limits;
  EXPECT_EQ(m[2], "4096") << limits;
}

// Finding: under 100 connections that send their request heads a byte at a time (and come back
// when dropped), the dashboard answered a legitimate reader once in 12 requests: each slow head
// held one of its 16 serving threads, 64 more waited, and the rest were turned away. Now heads are
// read by one thread that waits on all of them, and only whole requests take a serving thread.
TEST_F(Guard, DashboardAnswersDuringSlowHeaders) {
  allow_open_files(4 * kSlowClients);
  make_plan("plan.db");
  const int port = free_port();
  pid_t dashboard = spawn({kHippo, "--db", path("plan.db"), "dashboard", "--bind",
                           "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(appears(log_path(dashboard), "read-only at")) << read_file(log_path(dashboard));

  std::atomic<bool> attacking{true};
  std::thread attacker([&] {
    std::vector<int> slow(kSlowClients, -1);
    while (attacking) {
      for (int& fd : slow) {
        pollfd p{fd, POLLIN, 0};
        if (fd >= 0 && poll(&p, 1, 0) > 0) {  // answered (408, 503) or closed: come back
          close(fd);
          fd = -1;
        }
        if (fd < 0) {
          fd = connect_without_waiting(port, 1);
          const std::string head = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";
          if (fd >= 0) (void)send(fd, head.data(), head.size(), MSG_NOSIGNAL);
        } else {
          (void)send(fd, "X", 1, MSG_NOSIGNAL);  // a header that never ends
        }
      }
      std::this_thread::sleep_for(200ms);
    }
    for (int fd : slow)
      if (fd >= 0) close(fd);
  });
  std::this_thread::sleep_for(1s);  // the slow clients settle in

  const std::string request =
      "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\nConnection: close\r\n\r\n";
  int answered = 0;
  for (int i = 0; i < kReaderRequests; ++i) {
    const auto start = Clock::now();
    int fd = connect_loopback(port);
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    timeval timeout{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    char status[12] = {};
    const bool ok = recv(fd, status, sizeof status, MSG_WAITALL) == sizeof status &&
                    std::string(status, sizeof status) == "HTTP/1.1 200" &&
                    Clock::now() - start < kAnswerBound;
    answered += ok;
    close(fd);
    std::this_thread::sleep_for(100ms);
  }
  attacking = false;
  attacker.join();
  std::printf("during %d slow clients, %d of %d requests answered within 1 s\n", kSlowClients,
              answered, kReaderRequests);
  EXPECT_GE(answered, kReaderRequests * 9 / 10);
}

// Finding: the plan was 0644 and checkpoint directories 0755: every local user read every study's
// specs, metrics and model weights. Now what a run makes is its owner's only.
TEST_F(Guard, WhatARunWritesIsPrivate) {
  const std::string db = path("plan.db"), checkpoints = path("plan.db.checkpoints");
  pid_t run = spawn({kHippo, "--db", db, "--format", "json", "run", spec("private", json::object()),
                     "--workers", "1"});
  // The WAL and shared memory exist while the run has the plan open.
  std::map<std::string, std::string> modes;
  for (int i = 0; i < 600 && (modes.size() < 3 || modes.count("checkpoint") == 0); ++i) {
    for (const char* suffix : {"-wal", "-shm"})
      if (fs::exists(db + suffix)) modes[suffix] = mode_of(db + suffix);
    if (fs::exists(checkpoints))
      for (const std::string& name : checkpoint_names(checkpoints))
        if (name.find(".tmp.") == std::string::npos)
          modes["checkpoint"] = mode_of(checkpoints + "/" + name);
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(exit_status_within(run, 120), 0) << read_file(log_path(run));
  EXPECT_EQ(modes["-wal"], "0600");
  EXPECT_EQ(modes["-shm"], "0600");
  EXPECT_EQ(modes["checkpoint"], "0600");
  EXPECT_EQ(mode_of(db), "0600");
  EXPECT_EQ(mode_of(checkpoints), "0700");
  EXPECT_EQ(mode_of(checkpoints + "/.hippo-storage"), "0600");
  for (const std::string& name : checkpoint_names(checkpoints))
    EXPECT_EQ(mode_of(checkpoints + "/" + name), "0600") << name;
}

// Sharing is deliberate: in a directory given to a group with its setgid bit, the plan, the
// checkpoint directory and its files are readable (never writable) by the group.
TEST_F(Guard, ASetgidDirectorySharesWithItsGroup) {
  const std::string shared = path("shared");
  fs::create_directories(shared);
  ASSERT_EQ(chmod(shared.c_str(), 02770), 0);
  const std::string db = shared + "/plan.db", checkpoints = db + ".checkpoints";
  Result r = sh(kHippo + " --db " + db + " --format json run " + spec("shared", json::object()) +
                " --workers 1 >/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(mode_of(db), "0640");
  EXPECT_EQ(mode_of(checkpoints), "2750");
  EXPECT_EQ(mode_of(checkpoints + "/.hippo-storage"), "0640");
  for (const std::string& name : checkpoint_names(checkpoints))
    EXPECT_EQ(mode_of(checkpoints + "/" + name), "0640") << name;
}

}  // namespace
}  // namespace hippo::e2e
