// What the end-to-end tests share: running commands, spawning the real `hippo` and
// `hippo-worker` processes, and a fixture that gives each test its own temporary directory (and
// its own $HIPPO_HOME, so that the operator's local key is the test's own).
//
// $HIPPO_E2E_BINARY runs the tests against another `hippo` (with its `hippo-worker` beside it),
// e.g. the build of an older commit, to see which of them it fails.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace hippo::e2e {

namespace fs = std::filesystem;
using nlohmann::json;

inline const std::string kHippo =
    std::getenv("HIPPO_E2E_BINARY") ? std::getenv("HIPPO_E2E_BINARY") : HIPPO_BINARY;
inline const std::string kExamples = HIPPO_EXAMPLES;

struct Result {
  int status = -1;
  std::string out;
};

using Clock = std::chrono::steady_clock;

// Whether the binaries these tests run use AddressSanitizer (the sanitizer build defines
// HIPPO_SANITIZED, tests/CMakeLists.txt): its shadow memory takes terabytes of address space, so
// no cap on a process's address space can hold.
#ifdef HIPPO_SANITIZED
inline constexpr bool kAddressSanitized = true;
#else
inline constexpr bool kAddressSanitized = false;
#endif

// Caps this process's address space at `bytes` (in a spawned child, before exec), so that an
// attack that would take more memory fails instead of taking the machine. Not under ASan (above).
inline void limit_address_space(uint64_t bytes) {
  if (kAddressSanitized) return;
  rlimit limit{bytes, bytes};
  setrlimit(RLIMIT_AS, &limit);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The loopback interface's address with `port` (0: any free port).
inline sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// A TCP port on the loopback interface that nothing listens on right now.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  socklen_t n = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), n) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0)
    ADD_FAILURE() << "no free port";
  close(fd);
  return ntohs(a.sin_port);
}

// A TCP connection to the loopback interface's `port` (a test failure if refused).
inline int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    ADD_FAILURE() << "cannot connect to port " << port;
  return fd;
}

// Waits up to `seconds` for the process to exit; its exit status, or -1 if it still runs.
inline int exit_status_within(pid_t pid, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// Waits up to 10 s for `text` to appear in a file.
inline bool appears(const std::string& file, const std::string& text) {
  for (int i = 0; i < 500; ++i) {
    if (read_file(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Runs a shell command, returns its exit status and standard output (stderr goes to the log).
inline Result sh(const std::string& command) {
  Result r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The checkpoint files (and their temporary files) in a checkpoint directory, by name: what a
// master or worker wrote there (the directory also holds its storage identity, .hippo-storage).
inline std::vector<std::string> checkpoint_names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind("state-", 0) == 0)
      out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The last line of a command's output, parsed as JSON.
// The job a fake master sends a worker: 8 steps of a tiny mlp on 256 samples, evaluated at step
// 8, with these snapshots ([{step, state, file}]).
inline json small_job(const json& snapshots) {
  return {{"v", 1},
          {"type", "job"},
          {"job", 1},
          {"run",
           {{"model", {{"type", "mlp"}, {"hidden", {8}}}},
            {"data", "fashion-mnist"},
            {"train_samples", 256},
            {"eval_samples", 64},
            {"seed", 0},
            {"fixed", {{"batch_size", 32}, {"optimizer", "sgd"}}}}},
          {"hyperparameters",
           {{"lr", {{"segments", {{{"kind", "constant"}, {"start", 0}, {"v0", 0.1}}}}}}}},
          {"from", 0},
          {"to", 8},
          {"parent_state", -1},
          {"parent_file", ""},
          {"eval_steps", {8}},
          {"snapshots", snapshots}};
}

inline json last_json(const std::string& out) {
  size_t end = out.find_last_not_of('\n');
  size_t start = out.rfind('\n', end);
  return json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1));
}

// Every trial's metrics, by trial number: [(step, name, value)] as JSON text, so that equal text
// means equal bits (doubles are written with round-trip precision).
inline std::map<int64_t, std::string> metrics_by_trial(const json& trials) {
  std::map<int64_t, std::string> out;
  for (const json& t : trials) out[t["trial"]] = t["metrics"].dump();
  return out;
}

// The operator's local key pair ($HIPPO_HOME/local.key, which a master without --auth makes on its
// first start), as (public, secret) Z85 text; empty when there is none.
inline std::pair<std::string, std::string> local_key_pair() {
  const char* home = std::getenv("HIPPO_HOME");
  std::ifstream in(std::string(home ? home : "") + "/local.key");
  std::string secret;
  std::getline(in, secret);
  char public_key[41] = {};
  if (secret.size() != 40 || zmq_curve_public(public_key, secret.c_str()) != 0) return {};
  return {public_key, secret};
}

// Makes `socket` a CURVE client that proves the local key to a master that proves it too.
// Waits up to 10 s for the key (a master just spawned makes it on its start).
inline void use_local_key(zmq::socket_t& socket) {
  std::pair<std::string, std::string> keys = local_key_pair();
  for (int i = 0; i < 500 && keys.second.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    keys = local_key_pair();
  }
  const auto& [public_key, secret] = keys;
  if (secret.empty()) {
    ADD_FAILURE() << "no local key in $HIPPO_HOME";
    return;
  }
  socket.set(zmq::sockopt::curve_serverkey, public_key);
  socket.set(zmq::sockopt::curve_publickey, public_key);
  socket.set(zmq::sockopt::curve_secretkey, secret);
}

// The summary of a study from a master without --auth (it admits the local key), once the study
// has ended (null while it runs).
inline json protocol_status(const std::string& address, const std::string& name) {
  zmq::context_t context;
  zmq::socket_t req(context, zmq::socket_type::req);
  req.set(zmq::sockopt::linger, 0);
  use_local_key(req);
  req.connect(address);
  for (int64_t id = 1; id < 10; ++id) {
    std::string body = json{{"v", 1}, {"type", "status"}, {"study", id}}.dump();
    req.send(zmq::buffer(body), zmq::send_flags::none);
    zmq::message_t reply;
    if (!req.recv(reply, zmq::recv_flags::none)) return nullptr;
    json r = json::parse(reply.to_string());
    if (!r.value("ok", false)) return nullptr;
    if (r["summary"]["study"] != name) continue;
    return r["running"].get<bool>() ? json(nullptr) : r["summary"];
  }
  return nullptr;
}

class E2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-e2e-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    setenv("HIPPO_HOME", path("home").c_str(), 1);  // inherited by every process of the test
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string hippo(const std::string& db) const { return kHippo + " --db " + path(db) + " "; }

  // Waits (up to about 5 s) until the search plan at db_path holds a metric of `study`: work the
  // master has acknowledged, e.g. before killing it.
  void wait_for_a_metric(const std::string& db_path, const std::string& study) const {
    for (int i = 0; i < 500; ++i) {
      Result t =
          sh(kHippo + " --db " + db_path + " --format json trials " + study + " 2>/dev/null");
      if (t.status == 0 && t.out.find("\"step\"") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Waits until the search plan's only study has ended; its status ("running" if it has not).
  std::string wait_for_end(const std::string& db, int seconds) {
    for (int i = 0; i < seconds * 10; ++i) {
      Result r = sh(kHippo + " --db " + db + " --format json studies 2>/dev/null");
      if (r.status == 0) {
        json studies = json::parse(r.out);
        if (studies.size() == 1 && studies[0]["status"] != "running") return studies[0]["status"];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "running";
  }
  // A study's trials as `hippo trials --format json` prints them.
  json trials(const std::string& db, const std::string& study) {
    return json::parse(sh(kHippo + " --db " + db + " --format json trials " + study).out);
  }
  // The files in a checkpoint directory that no checkpoint kept for later studies names (a row
  // with retained_at, master/retention.h): once no study runs, there should be none.
  std::vector<std::string> files_not_retained(const std::string& db, const std::string& dir) {
    std::set<std::string> retained;
    std::istringstream rows(
        sh("sqlite3 " + db + " 'SELECT file FROM checkpoints WHERE retained_at IS NOT NULL'").out);
    for (std::string file; std::getline(rows, file);) retained.insert(file);
    std::vector<std::string> out;
    for (const std::string& file : checkpoint_names(dir))
      if (!retained.count(file)) out.push_back(file);
    return out;
  }
  // How many events of a kind the search plan holds.
  int64_t events(const std::string& db, const std::string& kind) {
    Result r = sh("sqlite3 " + db + " \"SELECT count(*) FROM events WHERE kind = '" + kind + "'\"");
    return std::stoll(r.out);
  }
  // A grid of 4 trials whose checkpoints are large enough to hit a small file-size limit.
  std::string small_study(const std::string& name) {
    return spec(name, {{"model", {{"hidden", {128}}}}});
  }

  // Writes a spec file: the CI example with some fields replaced.
  std::string spec(const std::string& name, const json& changes) {
    std::ifstream in(kExamples + "/fmnist-mlp-ci.json");
    json s = json::parse(in);
    s.merge_patch(changes);
    s["name"] = name;
    std::string file = path(name + ".json");
    std::ofstream(file) << s.dump(2);
    return file;
  }

  // A patch for spec(): a constant learning rate drawn from `distribution` (e.g. {"loguniform":
  // [lo, hi]}) instead of the CI example's schedule, so that each trial is one stage from step 0.
  static json constant_lr_from(const json& distribution) {
    json lr = {{"schedule", nullptr},
               {"unit", nullptr},
               {"init", nullptr},
               {"every", nullptr},
               {"gamma", nullptr}};
    lr.update(distribution);
    return {{"lr", lr}};
  }
  // The same over a grid of `values`.
  static json constant_lr(const std::vector<double>& values) {
    return constant_lr_from({{"grid", values}});
  }

  // Starts a process with its stderr in process-<pid>.log; `before_exec` runs in the child (e.g.
  // to set a resource limit). It is SIGKILLed at the end of the test if still running.
  pid_t spawn(const std::vector<std::string>& args,
              const std::function<void()>& before_exec = nullptr) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      std::string log = path("process-" + std::to_string(getpid()) + ".log");
      if (!freopen(log.c_str(), "w", stderr)) _exit(126);
      if (before_exec) before_exec();
      execv(argv[0], argv.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }
  std::string log_of(pid_t pid) const {
    std::ifstream log(path("process-" + std::to_string(pid) + ".log"));
    return std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  std::vector<pid_t> children_;
};

}  // namespace hippo::e2e
