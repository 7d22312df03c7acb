// A cluster without a shared disk: every worker with a checkpoint directory of its own (its own
// storage), states fetched through the master where a job needs one that another storage holds,
// and files deleted on the storage that holds them. Over ipc:// on this host, and as hosts of
// their own: each process in a Linux network namespace, real TCP between them over a bridge, CURVE
// on (those tests skip, saying why, where namespaces cannot be made: not root, no `ip`).
#include <unistd.h>

#include <algorithm>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

// Hosts on this machine: network namespaces, each with a veth pair to one bridge, addresses
// 10.<n>.0.2, 10.<n>.0.3, ... on a /24. Removed (namespaces, links, bridge) when destroyed.
class Hosts {
 public:
  // Why namespaces cannot be made here ("" when they can).
  static std::string why_not() {
    if (geteuid() != 0) return "not root (ip netns needs CAP_SYS_ADMIN)";
    if (sh("ip netns list >/dev/null 2>&1").status != 0) return "no usable `ip netns`";
    return "";
  }

  explicit Hosts(int count) : tag_(std::to_string(getpid() % 100000)) {
    const std::string net = std::to_string(100 + getpid() % 100);
    run("ip link add " + bridge() + " type bridge && ip link set " + bridge() + " up");
    for (int i = 0; i < count; ++i) {
      const std::string ns = name(i), outside = "hv" + tag_ + "x" + std::to_string(i);
      addresses_.push_back("10." + net + ".0." + std::to_string(i + 2));
      run("ip netns add " + ns + " && ip link add " + outside + " type veth peer name eth0 netns " +
          ns + " && ip link set " + outside + " master " + bridge() + " && ip link set " + outside +
          " up && ip -n " + ns + " addr add " + addresses_.back() + "/24 dev eth0 && ip -n " + ns +
          " link set eth0 up && ip -n " + ns + " link set lo up");
    }
  }
  ~Hosts() {
    for (size_t i = 0; i < addresses_.size(); ++i)
      sh("ip netns del " + name(int(i)) + " 2>/dev/null");
    sh("ip link del " + bridge() + " 2>/dev/null");
  }

  const std::string& address(int host) const { return addresses_.at(host); }
  // The command line prefix that runs a program on `host`.
  std::vector<std::string> on(int host) const {
    return {"/usr/sbin/ip", "netns", "exec", name(host)};
  }
  std::string shell_on(int host) const { return "ip netns exec " + name(host) + " "; }
  // Cuts the host off the network (its link down), or brings it back.
  void link(int host, bool up) const {
    run("ip -n " + name(host) + " link set eth0 " + (up ? "up" : "down"));
  }

 private:
  std::string name(int host) const { return "hippo" + tag_ + "h" + std::to_string(host); }
  std::string bridge() const { return "hb" + tag_; }
  static void run(const std::string& command) {
    Result r = sh(command + " 2>&1");
    if (r.status != 0) ADD_FAILURE() << command << ": " << r.out;
  }

  std::string tag_;
  std::vector<std::string> addresses_;
};

class Cluster : public E2ETest {
 protected:
  // The metrics of every trial of the CI example run on one host with a shared directory: what
  // every run below must equal, bit for bit.
  std::map<int64_t, std::string> reference() {
    Result r = sh(hippo("reference.db") + "run " + spec("ci", json::object()) + " --workers 2");
    EXPECT_EQ(r.status, 0) << r.out;
    return metrics_by_trial(trials(path("reference.db"), "ci"));
  }

  // The checkpoint files in a directory (checkpoints and their temporary files).
  std::vector<std::string> checkpoint_files(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().filename().string().rfind("state-", 0) == 0)
        out.push_back(entry.path().filename().string());
    return out;
  }

  // The files each storage should hold once the study ended: those of the checkpoint rows (kept
  // for later studies) that name its identity.
  std::vector<std::string> files_of_rows(const std::string& db, const std::string& dir) {
    const std::string identity = read_file(dir + "/.hippo-storage").substr(0, 32);
    std::istringstream rows(sh("sqlite3 " + db +
                               " \"SELECT file FROM checkpoints WHERE storages LIKE '%" + identity +
                               "%' ORDER BY file\"")
                                .out);
    std::vector<std::string> out;
    for (std::string file; std::getline(rows, file);) out.push_back(file);
    return out;
  }

  // Waits up to 10 s for every worker's directory to hold exactly the files that the plan's rows
  // say it holds: collection deleted every other file on the storage that held it.
  void expect_files_as_the_plan_says(const std::string& db, const std::vector<std::string>& dirs) {
    auto as_said = [&] {
      for (const std::string& dir : dirs) {
        std::vector<std::string> files = checkpoint_files(dir);
        std::sort(files.begin(), files.end());
        if (files != files_of_rows(db, dir)) return false;
      }
      return true;
    };
    for (int i = 0; i < 100 && !as_said(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const std::string& dir : dirs) {
      std::vector<std::string> files = checkpoint_files(dir);
      std::sort(files.begin(), files.end());
      EXPECT_EQ(files, files_of_rows(db, dir)) << dir;
    }
  }
};

// Three workers, each with its own checkpoint directory, on this host: every trial's metrics equal
// the shared-disk run's, states move between storages (counted in the summary), nothing is
// trained twice, and the files go from every storage once the study ends.
TEST_F(Cluster, SeparateDisksTrainTheSameTrials) {
  const std::map<int64_t, std::string> expected = reference();
  const std::string address = "ipc://" + path("master.sock"), db = path("cluster.db");
  // Nothing kept for later studies: every file goes when the study ends.
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master"),
         "--keep-checkpoints", "0"});
  std::vector<std::string> dirs;
  for (int i = 0; i < 3; ++i) {
    dirs.push_back(path("ck-w" + std::to_string(i)));
    spawn({kHippo, "worker", "--master", address, "--checkpoints", dirs.back(), "--name",
           "w" + std::to_string(i)});
  }
  Result r = sh(kHippo + " --master " + address + " --format json submit " +
                spec("ci", json::object()) + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]);
  EXPECT_GT(summary["bytes_moved"].get<int64_t>(), 0) << summary.dump();
  EXPECT_EQ(metrics_by_trial(trials(db, "ci")), expected);
  // Each storage has its own identity; the master's directory saw no checkpoint.
  std::set<std::string> identities;
  for (const std::string& dir : dirs) identities.insert(read_file(dir + "/.hippo-storage"));
  EXPECT_EQ(identities.size(), 3u);
  EXPECT_TRUE(checkpoint_files(path("ck-master")).empty());
  expect_files_as_the_plan_says(db, dirs);
  for (const std::string& dir : dirs) EXPECT_TRUE(files_of_rows(db, dir).empty()) << dir;
}

// The same as hosts of their own: the master and three workers each in a network namespace, real
// TCP over a bridge, CURVE keys.
TEST_F(Cluster, ThreeHostsWithoutASharedDiskTrainTheSameTrials) {
  if (std::string why = Hosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  const std::map<int64_t, std::string> expected = reference();
  Hosts hosts(4);
  for (const char* key : {"master", "worker", "client"})
    ASSERT_EQ(sh(kHippo + " keygen " + path(key) + " >/dev/null").status, 0);
  fs::create_directories(path("authorized/workers"));
  fs::create_directories(path("authorized/clients"));
  fs::copy_file(path("worker.pub"), path("authorized/workers/worker.pub"));
  fs::copy_file(path("client.pub"), path("authorized/clients/client.pub"));
  const std::string address = "tcp://" + hosts.address(0) + ":5555", db = path("cluster.db");
  std::vector<std::string> master = hosts.on(0);
  for (std::string a :
       {kHippo, std::string("--db"), db, std::string("master"), std::string("--bind"), address,
        std::string("--checkpoints"), path("ck-master"), std::string("--auth"),
        std::string("--key"), path("master.key"), std::string("--authorized"), path("authorized")})
    master.push_back(a);
  const pid_t master_pid = spawn(master);
  ASSERT_TRUE(appears(path("process-" + std::to_string(master_pid) + ".log"), "listening on"));
  std::vector<std::string> dirs;
  for (int i = 1; i <= 3; ++i) {
    dirs.push_back(path("ck-host" + std::to_string(i)));
    std::vector<std::string> worker = hosts.on(i);
    for (std::string a : {kHippo, std::string("worker"), std::string("--master"), address,
                          std::string("--master-key"), path("master.pub"), std::string("--key"),
                          path("worker.key"), std::string("--checkpoints"), dirs.back(),
                          std::string("--name"), "host" + std::to_string(i)})
      worker.push_back(a);
    spawn(worker);
  }
  Result r = sh(hosts.shell_on(0) + kHippo + " --master " + address + " --master-key " +
                path("master.pub") + " --key " + path("client.key") + " --format json submit " +
                spec("ci", json::object()) + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]);
  EXPECT_GT(summary["bytes_moved"].get<int64_t>(), 0) << summary.dump();
  EXPECT_EQ(metrics_by_trial(trials(db, "ci")), expected);
  // The states kept for later studies (the default budget) stay where they are, and only there.
  expect_files_as_the_plan_says(db, dirs);
}

}  // namespace
}  // namespace hippo::e2e
