// `hippo dashboard` under bad input, with raw sockets against the real process serving a plan
// made by real runs: path traversal (raw and encoded), unknown studies, huge requests, other
// methods, foreign Host names, slow clients, many connections at once. Every answer is a clear
// 4xx (or 503 when full), the process never dies, other clients are served, and the plan's bytes
// never change. Also the command line's refusals (exit status 2).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "tests/dashboard/dashboard_fixture.h"

namespace hippo::testing {
namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads what the server sends until it closes or `timeout` passes.
std::string read_all(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  auto until = Clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

struct Reply {
  int status = 0;  // 0: no answer
  std::string text;
};

Reply parse(const std::string& text) {
  Reply r;
  r.text = text;
  if (text.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(text.substr(9, 3));
  return r;
}

// One raw request on its own connection ("Connection: close" is added unless asked not to).
Reply raw(int port, const std::string& request,
          std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request);
  Reply r = parse(read_all(fd, timeout));
  close(fd);
  return r;
}

Reply get(int port, const std::string& target, const std::string& host = "127.0.0.1") {
  return raw(port,
             "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class DashboardServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plan_ = new RealPlan;
    plan_->make("server");
    before_ = file_bytes(plan_->db);
    dashboard_ = new DashboardProcess(plan_->db, (plan_->dir / "dashboard.log").string());
  }
  static void TearDownTestSuite() {
    delete dashboard_;
    fs::remove_all(plan_->dir);
    delete plan_;
  }
  void SetUp() override { ASSERT_GT(port(), 0) << dashboard_->log(); }
  void TearDown() override {
    // After every test: still alive, still serving, the plan unchanged.
    EXPECT_TRUE(dashboard_->alive()) << dashboard_->log();
    EXPECT_EQ(get(port(), "/").status, 200);
    EXPECT_TRUE(file_bytes(plan_->db) == before_) << "the plan's bytes changed";
  }
  static int port() { return dashboard_->port(); }

  static RealPlan* plan_;
  static DashboardProcess* dashboard_;
  static std::string before_;
};
RealPlan* DashboardServer::plan_ = nullptr;
DashboardProcess* DashboardServer::dashboard_ = nullptr;
std::string DashboardServer::before_;

TEST_F(DashboardServer, ServesEveryPageAndTheReport) {
  for (const std::string path :
       {"/", "/study/grid", "/study/1", "/study/1/tree", "/study/1/tree?expand=all",
        "/study/1/tree?expand=0&trial=1", "/study/1/timeline", "/compare?id=1&id=grid-trial-based",
        "/report/grid"}) {
    Reply r = get(port(), path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_NE(r.text.find("Content-Security-Policy: default-src 'none'"), std::string::npos);
  }
  // HEAD is a GET without its body.
  Reply head = raw(port(), "HEAD / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.text.find("<html"), std::string::npos);
}

// `--bind 127.0.0.1:0` takes any free port: the first line on stdout says which, as soon as it
// listens (the fixture waits for it while the dashboard runs); the rest goes to stderr.
TEST_F(DashboardServer, TheFirstLineOnStdoutIsItsAddress) {
  EXPECT_EQ(dashboard_->output(), "http://127.0.0.1:" + std::to_string(port()) + "/\n");
  EXPECT_NE(dashboard_->log().find("read-only at http://127.0.0.1:"), std::string::npos)
      << dashboard_->log();
}

TEST_F(DashboardServer, PathTraversalIsRefused) {
  for (const std::string target :
       {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "/study/..%2f..%2f..%2fetc%2fpasswd", "/study/1/../../../etc/passwd",
        "/report/..%2F..%2Fetc%2Fpasswd", "//etc/passwd", "/..\\..\\etc\\passwd", "/study/%00",
        "/static/../../../../etc/passwd", "/%c0%ae%c0%ae/etc/passwd"}) {
    Reply r = get(port(), target);
    EXPECT_GE(r.status, 400) << target;
    EXPECT_LT(r.status, 500) << target;
    EXPECT_EQ(r.text.find("root:"), std::string::npos) << target;
  }
}

TEST_F(DashboardServer, UnknownStudiesAndBadQueriesAre4xx) {
  for (const std::string target :
       {"/study/999", "/study/no-such-study", "/study/999/tree", "/study/999/timeline",
        "/report/nope", "/compare?id=999", "/nothing/here", "/study/1/tree?expand=999999"}) {
    Reply r = get(port(), target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_NE(r.text.find("<p class=\"error\">"), std::string::npos) << target;
  }
  EXPECT_EQ(get(port(), "/compare").status, 400);
  for (const std::string expand : {"", "x", "-1", "1e3", "all%00"})
    EXPECT_EQ(get(port(), "/study/1/tree?expand=" + expand).status, 400) << expand;
  std::string many = "/compare?id=1";
  for (int i = 2; i < 20; ++i) many += "&id=" + std::to_string(i);  // httplib drops repeats
  EXPECT_EQ(get(port(), many).status, 400);
  EXPECT_EQ(get(port(), "/study/" + std::string(1000, 'x')).status, 400);
  // The name of the unknown study comes back as text, escaped.
  Reply r = get(port(), "/study/%3Cscript%3Ealert(1)%3C%2Fscript%3E");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.text.find("<script>alert"), std::string::npos);
  EXPECT_NE(r.text.find("&lt;script&gt;alert(1)"), std::string::npos);
}

TEST_F(DashboardServer, HugeRequestsAre4xx) {
  EXPECT_EQ(get(port(), "/?q=" + std::string(10000, 'a')).status, 414);
  EXPECT_EQ(get(port(), "/?q=" + std::string(1 << 20, 'a')).status, 431);
  std::string headers = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  for (int i = 0; i < 20000; ++i) headers += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(raw(port(), headers + "\r\n").status, 431);
  EXPECT_EQ(raw(port(), "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Big: " +
                            std::string(9000, 'b') + "\r\n\r\n")
                .status,
            400);
  EXPECT_EQ(raw(port(), "NONSENSE\r\n\r\n").status, 400);
}

TEST_F(DashboardServer, OnlyGetAndHeadFromLoopbackNames) {
  for (const std::string method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    Reply r = raw(port(), method +
                              " / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
                              "Connection: close\r\n\r\nhello");
    EXPECT_EQ(r.status, 405) << method;
  }
  // A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) is not served.
  EXPECT_EQ(get(port(), "/", "attacker.example:" + std::to_string(port())).status, 421);
  EXPECT_EQ(get(port(), "/", "localhost:" + std::to_string(port())).status, 200);
  EXPECT_EQ(get(port(), "/", "[::1]:" + std::to_string(port())).status, 200);
}

TEST_F(DashboardServer, SlowClientsAreCutAndDoNotStopOthers) {
  // Ten clients send a request a byte every half second: they would take minutes.
  std::vector<int> slow;
  for (int i = 0; i < 10; ++i) {
    int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    send_all(fd, "GET / HTTP/1.1\r\nHo");
    slow.push_back(fd);
  }
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    for (int i = 0; i < 20 && trickling; ++i) {
      for (int fd : slow) send(fd, "s", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  // Meanwhile others are answered at once.
  for (int i = 0; i < 10; ++i) {
    auto start = Clock::now();
    EXPECT_EQ(get(port(), "/study/1").status, 200);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));  // not the slow ones' 5 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Each slow client is answered 408 once its request has taken 5 s.
  auto start = Clock::now();
  for (int fd : slow) {
    Reply r = parse(read_all(fd, std::chrono::seconds(10)));
    EXPECT_EQ(r.status, 408);
    close(fd);
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  trickling = false;
  trickle.join();
}

TEST_F(DashboardServer, ManyConnectionsAtOnceAreAnsweredOrTurnedAway) {
  // 400 connections that each send a request at once: every one is answered, 200 or 503.
  std::vector<int> fds;
  for (int i = 0; i < 400; ++i) {
    int fd = connect_to(port());
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  for (int fd : fds)
    send_all(fd, "GET /study/1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  int ok = 0, busy = 0;
  for (int fd : fds) {
    Reply r = parse(read_all(fd, std::chrono::seconds(30)));
    ok += r.status == 200;
    busy += r.status == 503;
    EXPECT_TRUE(r.status == 200 || r.status == 503) << r.text.substr(0, 100);
    close(fd);
  }
  EXPECT_EQ(ok + busy, 400);
  EXPECT_GT(ok, 0);
  // 400 idle connections (a request never sent) hold nothing for long.
  fds.clear();
  for (int i = 0; i < 400; ++i) fds.push_back(connect_to(port()));
  auto start = Clock::now();
  Reply r = get(port(), "/");
  EXPECT_TRUE(r.status == 200 || r.status == 503) << r.text.substr(0, 100);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(12));
  for (int fd : fds) close(fd);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // the idle ones time out
}

TEST(DashboardCommand, RefusesBadInvocationsWithExitStatus2) {
  RealPlan plan;
  plan.dir = fs::temp_directory_path() / ("hippo-dashboard-cli-" + std::to_string(getpid()));
  fs::create_directories(plan.dir);
  plan.db = (plan.dir / "plan.db").string();
  const std::string hippo = kHippo + " --db " + plan.db + " ";
  auto status = [&](const std::string& args) { return sh(hippo + args + " 2>&1").status; };
  // No plan yet: nothing is created.
  EXPECT_EQ(status("dashboard --bind 127.0.0.1:0"), 2);
  EXPECT_EQ(status("report x -o " + (plan.dir / "r.html").string()), 2);
  EXPECT_FALSE(fs::exists(plan.db));
  plan.run(plan.spec("grid.json", "grid", json::object()), "grid");
  // Not loopback without --expose; malformed --bind; an unknown study; an unwritable file.
  auto r = sh(hippo + "dashboard --bind 0.0.0.0:0 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--expose"), std::string::npos) << r.out;
  EXPECT_EQ(status("dashboard --bind nonsense"), 2);
  EXPECT_EQ(status("dashboard --bind 127.0.0.1:99999"), 2);
  EXPECT_EQ(status("dashboard --refresh 0"), 2);
  EXPECT_EQ(status("report nope -o " + (plan.dir / "r.html").string()), 2);
  EXPECT_EQ(status("report grid -o /nonexistent/dir/r.html"), 2);
  // The report holds what the plan holds: the plan's mode (0600), whatever the umask, unless
  // --mode says otherwise; a mode that is not plain permission bits is refused.
  const std::string report = (plan.dir / "r.html").string();
  EXPECT_EQ(status("report grid -o " + report), 0);
  EXPECT_EQ(fs::status(report).permissions(), fs::status(plan.db).permissions());
  EXPECT_EQ(fs::status(report).permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(sh("umask 000 && " + hippo + "report grid -o " + report + " --mode 0644 2>&1").status,
            0);
  EXPECT_EQ(fs::status(report).permissions(), fs::perms::owner_read | fs::perms::owner_write |
                                                  fs::perms::group_read | fs::perms::others_read);
  EXPECT_EQ(status("report grid -o " + report + " --mode 4755"), 2);
  EXPECT_EQ(status("report grid -o " + report + " --mode rw"), 2);
  // A plan that is not a plan.
  std::ofstream(plan.dir / "text.db") << "not a database";
  EXPECT_EQ(
      sh(kHippo + " --db " + (plan.dir / "text.db").string() + " dashboard --bind 127.0.0.1:0 2>&1")
          .status,
      2);
  // --expose says what it exposes (and binds no port that this test then talks to).
  DashboardProcess exposed(plan.db, (plan.dir / "exposed.log").string(),
                           {"--bind", "0.0.0.0:0", "--expose"});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_NE(exposed.log().find("anyone who can reach"), std::string::npos) << exposed.log();
  EXPECT_EQ(exposed.stop(), 0);
  fs::remove_all(plan.dir);
}

}  // namespace
}  // namespace hippo::testing
