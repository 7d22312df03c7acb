// A cluster without a shared disk: every worker with a checkpoint directory of its own (its own
// storage), states fetched through the master where a job needs one that another storage holds,
// and files deleted on the storage that holds them. Over ipc:// on this host, and as hosts of
// their own: each process in a Linux network namespace, real TCP between them over a bridge, CURVE
// on (those tests skip, saying why, where namespaces cannot be made: not root, no `ip`), with links
// cut, lossy (iptables, or netem where the kernel has it) or slow (netem).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "tests/e2e/e2e_helper.h"
#include "tests/e2e/forge.h"

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

  // Names and addresses new to this process: a namespace's removal is finished by the kernel in
  // the background, and the next test's must not meet it.
  explicit Hosts(int count) : tag_(std::to_string(getpid() % 10000) + "n" + std::to_string(made_)) {
    const std::string net = std::to_string(100 + (getpid() + made_++) % 100);
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
  // Adds `args` as a netem queue on the host's link; false where netem is not available.
  bool netem(int host, const std::string& args) const {
    return sh("ip netns exec " + name(host) + " tc qdisc add dev eth0 root netem " + args +
              " 2>/dev/null")
               .status == 0;
  }
  // Drops packets of the host at random, with this probability, in each direction (iptables'
  // statistic match); false where iptables cannot.
  bool drop(int host, double probability) const {
    const std::string rule = " -m statistic --mode random --probability " +
                             std::to_string(probability) + " -j DROP 2>/dev/null";
    const std::string iptables = "ip netns exec " + name(host) + " iptables -A ";
    return sh(iptables + "INPUT" + rule).status == 0 && sh(iptables + "OUTPUT" + rule).status == 0;
  }
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

  static inline int made_ = 0;  // Hosts made by this process
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
      for (const std::string& dir : dirs)
        if (checkpoint_names(dir) != files_of_rows(db, dir)) return false;
      return true;
    };
    for (int i = 0; i < 100 && !as_said(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const std::string& dir : dirs)
      EXPECT_EQ(checkpoint_names(dir), files_of_rows(db, dir)) << dir;
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
  EXPECT_TRUE(checkpoint_names(path("ck-master")).empty());
  expect_files_as_the_plan_says(db, dirs);
  for (const std::string& dir : dirs) EXPECT_TRUE(files_of_rows(db, dir).empty()) << dir;
}

// A master on host 0 and workers on hosts 1..n, each in its network namespace with its own
// checkpoint directory, CURVE keys, real TCP.
class HostCluster : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    if (std::string why = Hosts::why_not(); !why.empty()) GTEST_SKIP() << why;
  }

  void start(int workers, std::vector<std::string> master_options = {}) {
    hosts_ = std::make_unique<Hosts>(workers + 1);
    for (const char* key : {"master", "worker", "client"})
      ASSERT_EQ(sh(kHippo + " keygen " + path(key) + " >/dev/null").status, 0);
    for (const char* role : {"workers", "clients"})
      fs::create_directories(path("authorized/") + role);
    fs::copy_file(path("worker.pub"), path("authorized/workers/worker.pub"));
    fs::copy_file(path("client.pub"), path("authorized/clients/client.pub"));
    address_ = "tcp://" + hosts_->address(0) + ":5555";
    db_ = path("cluster.db");
    std::vector<std::string> master = hosts_->on(0);
    for (const std::string& a :
         {kHippo, std::string("--db"), db_, std::string("master"), std::string("--bind"), address_,
          std::string("--checkpoints"), path("ck-master"), std::string("--auth"),
          std::string("--key"), path("master.key"), std::string("--authorized"),
          path("authorized")})
      master.push_back(a);
    master.insert(master.end(), master_options.begin(), master_options.end());
    const pid_t pid = spawn(master);
    ASSERT_TRUE(appears(path("process-" + std::to_string(pid) + ".log"), "listening on"));
    for (int i = 1; i <= workers; ++i) {
      dirs_.push_back(path("ck-host" + std::to_string(i)));
      std::vector<std::string> worker = hosts_->on(i);
      for (const std::string& a :
           {kHippo, std::string("worker"), std::string("--master"), address_,
            std::string("--master-key"), path("master.pub"), std::string("--key"),
            path("worker.key"), std::string("--checkpoints"), dirs_.back(), std::string("--name"),
            "host" + std::to_string(i)})
        worker.push_back(a);
      spawn(worker);
    }
  }

  // `hippo submit` from the master's host; with --wait, its summary is the last line.
  Result submit(const std::string& spec_file, bool wait) {
    return sh(hosts_->shell_on(0) + kHippo + " --master " + address_ + " --master-key " +
              path("master.pub") + " --key " + path("client.key") + " --format json submit " +
              spec_file + (wait ? " --wait" : ""));
  }

  // The jobs a worker ran that started after `since` (unix seconds), from the plan's executions.
  int64_t jobs_of(const std::string& worker, double since) {
    Result r = sh("sqlite3 " + db_ + " \"SELECT count(*) FROM executions WHERE worker = '" +
                  worker + "' AND started_at > " + std::to_string(since) + "\"");
    return std::stoll(r.out);
  }

  // How many times a worker said hello to the master.
  int64_t joins_of(const std::string& worker) {
    Result r = sh("sqlite3 " + db_ +
                  " \"SELECT count(*) FROM events WHERE kind = 'worker_joined' AND "
                  "json_extract(detail, '$.name') = '" +
                  worker + "'\"");
    return std::stoll(r.out);
  }

  std::unique_ptr<Hosts> hosts_;
  std::string address_, db_;
  std::vector<std::string> dirs_;
};

// The cluster the docs describe: three workers on three hosts without a shared disk.
TEST_F(HostCluster, ThreeHostsWithoutASharedDiskTrainTheSameTrials) {
  const std::map<int64_t, std::string> expected = reference();
  start(3);
  Result r = submit(spec("ci", json::object()), true);
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]);
  EXPECT_GT(summary["bytes_moved"].get<int64_t>(), 0) << summary.dump();
  std::cout << "three hosts: " << summary.dump() << "\n";
  EXPECT_EQ(metrics_by_trial(trials(db_, "ci")), expected);
  // The states kept for later studies (the default budget) stay where they are, and only there.
  expect_files_as_the_plan_says(db_, dirs_);
}

// A worker cut off the network (its link down) for 30 s while it trains: lost after the
// master's timeout, its job given to the other worker; its reports from then on are refused
// (the master knows it no more: it must say hello again); it rejoins and gets new work; the
// trials equal an undisturbed run's.
TEST_F(HostCluster, AWorkerCutOffFor30SecondsRejoins) {
  const std::map<int64_t, std::string> expected = reference();
  start(2, {"--worker-timeout", "5"});
  ASSERT_EQ(submit(spec("ci", json::object()), false).status, 0);
  wait_for_a_metric(db_, "ci");
  hosts_->link(1, false);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  hosts_->link(1, true);
  EXPECT_EQ(wait_for_end(db_, 120), "done");
  EXPECT_EQ(metrics_by_trial(trials(db_, "ci")), expected);
  EXPECT_GE(events(db_, "worker_lost"), 1);
  // Back: it says hello again (within its connection's heartbeat timeout), and a new study's
  // work reaches it.
  for (int i = 0; i < 600 && joins_of("host1") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(joins_of("host1"), 2);
  const double back =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  json more = constant_lr({0.1, 0.08, 0.06, 0.04, 0.03, 0.02});
  Result r = submit(spec("after", {{"hyperparameters", more}}), true);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GE(jobs_of("host1", back), 1);
  std::cout << "cut off 30 s: steps executed " << last_json(r.out)["steps_executed"]
            << ", worker_lost events " << events(db_, "worker_lost") << "\n";
}

// The master cut off from every worker for 20 s: it loses them all, and they come back; the
// study ends with the trials of an undisturbed run.
TEST_F(HostCluster, TheMasterCutOffFor20SecondsLosesNothing) {
  const std::map<int64_t, std::string> expected = reference();
  start(2, {"--worker-timeout", "5"});
  ASSERT_EQ(submit(spec("ci", json::object()), false).status, 0);
  wait_for_a_metric(db_, "ci");
  hosts_->link(0, false);
  std::this_thread::sleep_for(std::chrono::seconds(20));
  hosts_->link(0, true);
  EXPECT_EQ(wait_for_end(db_, 120), "done");
  EXPECT_EQ(metrics_by_trial(trials(db_, "ci")), expected);
  EXPECT_GE(events(db_, "worker_lost"), 1);
}

// Every worker link loses 1% of its packets (and, where the kernel has netem, is delayed by
// 50 ms +- 10 ms): the same trials. Without netem (this machine's and CI's kernels), the loss is
// iptables' statistic match dropping 1% of the packets in each direction, and there is no delay.
TEST_F(HostCluster, SlowLossyLinksTrainTheSameTrials) {
  const std::map<int64_t, std::string> expected = reference();
  start(3);
  std::string how = "netem: 50 ms +- 10 ms, 1% loss";
  for (int host = 1; host <= 3; ++host) {
    if (hosts_->netem(host, "delay 50ms 10ms loss 1%")) continue;
    how = "iptables: 1% loss each way, no delay (no netem in this kernel)";
    if (!hosts_->drop(host, 0.01)) GTEST_SKIP() << "neither tc netem nor iptables' statistic match";
  }
  Result r = submit(spec("ci", json::object()), true);
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  std::cout << "lossy links (" << how << "): " << summary.dump() << "\n";
  EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]);
  EXPECT_EQ(metrics_by_trial(trials(db_, "ci")), expected);
}

// A worker's disk wiped while it runs (every file in its directory, its identity too), between a
// study and a later one that goes on from the states the first kept (retention.h): what the
// wiped storage held is read from another storage's copy or rebuilt by replay, and the later
// study's trials equal those of a run of it alone.
TEST_F(Cluster, AWorkersDiskWipedUnderItsStates) {
  const std::string address = "ipc://" + path("master.sock"), db = path("cluster.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master")});
  // The first study on w0 alone: every state it keeps is on w0's storage only.
  std::vector<std::string> dirs = {path("ck-w0"), path("ck-w1")};
  auto start_worker = [&](int i) {
    // One state in memory: a parent is mostly read from the disk.
    spawn({kHippo, "worker", "--master", address, "--checkpoints", dirs[i], "--name",
           "w" + std::to_string(i), "--cache", "1"});
  };
  start_worker(0);
  const std::string client = kHippo + " --master " + address + " --format json submit ";
  ASSERT_EQ(sh(client + spec("first", json::object()) + " --wait").status, 0);
  ASSERT_GT(checkpoint_names(dirs[0]).size(), 0u);  // states kept for the next study
  for (const auto& entry : fs::directory_iterator(dirs[0])) fs::remove_all(entry.path());
  start_worker(1);
  const json longer = {{"length", {{"epochs", 5}}}};
  Result r = sh(client + spec("longer", longer) + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  Result alone = sh(hippo("alone.db") + "run " + spec("longer", longer) + " --workers 2");
  ASSERT_EQ(alone.status, 0) << alone.out;
  EXPECT_EQ(metrics_by_trial(trials(db, "longer")),
            metrics_by_trial(trials(path("alone.db"), "longer")));
  // What the wiped states held was trained again, and the summary says where each step came
  // from: executed + reused (the first study's states still read) = unique + redone.
  const json summary = last_json(r.out);
  auto count = [&](const char* field) { return summary[field].get<int64_t>(); };
  EXPECT_EQ(count("steps_executed") + count("steps_reused"),
            count("steps_unique") + count("steps_redone"))
      << summary.dump();
  EXPECT_GE(events(db, "checkpoint_lost"), 1);
  std::cout << "disk wiped: checkpoint_lost events " << events(db, "checkpoint_lost") << ", "
            << summary.dump() << "\n";
}

// `hippo drain WORKER`: the worker gets no more work, ends the job it runs, and exits (status
// 0); the study goes on without it and ends with the trials of an undisturbed run. A name no
// worker has is refused, and so is a client that is not an admin.
TEST_F(Cluster, ADrainedWorkerFinishesItsJobAndExits) {
  const json longer = {{"length", {{"epochs", 6}}}};
  Result alone = sh(hippo("alone.db") + "run " + spec("ci", longer) + " --workers 2");
  ASSERT_EQ(alone.status, 0) << alone.out;
  const std::string address = "ipc://" + path("master.sock"), db = path("cluster.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master")});
  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(spawn({kHippo, "worker", "--master", address, "--checkpoints",
                             path("ck-w" + std::to_string(i)), "--name", "w" + std::to_string(i)}));
  const std::string client = kHippo + " --master " + address + " ";
  ASSERT_EQ(sh(client + "submit " + spec("ci", longer)).status, 0);
  wait_for_a_metric(db, "ci");
  Result drained = sh(client + "drain w1");
  ASSERT_EQ(drained.status, 0) << drained.out;
  EXPECT_NE(drained.out.find("worker w1"), std::string::npos) << drained.out;
  const double at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_EQ(exit_status_within(workers[1], 30), 0);
  EXPECT_EQ(wait_for_end(db, 120), "done");
  EXPECT_EQ(metrics_by_trial(trials(db, "ci")), metrics_by_trial(trials(path("alone.db"), "ci")));
  EXPECT_EQ(events(db, "worker_drained"), 1);
  Result later = sh("sqlite3 " + db + " \"SELECT count(*) FROM executions WHERE worker = 'w1' " +
                    "AND started_at > " + std::to_string(at) + "\"");
  EXPECT_EQ(std::stoll(later.out), 0);  // no job after the drain
  Result unknown = sh(client + "drain nobody 2>&1");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.out.find("no connected worker is named nobody"), std::string::npos)
      << unknown.out;
}

// The master moved to another host: its plan file copied there, a checkpoint directory of its own
// (another storage), its workers started again pointing at the new address, each on the directory
// it had. The states the first study kept are still on the workers' storages, and a study that goes
// on from them reuses them: the same trials as a run of it alone.
TEST_F(Cluster, AMasterRestartedElsewhereFindsItsWorkersStates) {
  const std::string first_address = "ipc://" + path("first.sock");
  const pid_t first = spawn({kHippo, "--db", path("first.db"), "master", "--bind", first_address,
                             "--checkpoints", path("ck-first")});
  std::vector<std::string> dirs = {path("ck-w0"), path("ck-w1")};
  std::vector<pid_t> workers;
  auto start_workers = [&](const std::string& address) {
    workers.clear();
    for (int i = 0; i < 2; ++i)
      workers.push_back(spawn({kHippo, "worker", "--master", address, "--checkpoints", dirs[i],
                               "--name", "w" + std::to_string(i)}));
  };
  start_workers(first_address);
  ASSERT_EQ(sh(kHippo + " --master " + first_address + " submit " + spec("first", json::object()) +
               " --wait")
                .status,
            0);
  for (pid_t pid : workers) kill(pid, SIGTERM);
  kill(first, SIGTERM);
  for (pid_t pid : workers) exit_status_within(pid, 10);
  exit_status_within(first, 10);
  fs::copy_file(path("first.db"), path("moved.db"));
  const std::string address = "ipc://" + path("moved.sock");
  spawn({kHippo, "--db", path("moved.db"), "master", "--bind", address, "--checkpoints",
         path("ck-moved")});
  start_workers(address);
  const json longer = {{"length", {{"epochs", 5}}}};
  Result r = sh(kHippo + " --master " + address + " --format json submit " +
                spec("longer", longer) + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  EXPECT_GT(summary["steps_reused"].get<int64_t>(), 0) << summary.dump();
  EXPECT_EQ(summary["steps_executed"].get<int64_t>(),
            summary["steps_unique"].get<int64_t>() - summary["steps_reused"].get<int64_t>())
      << summary.dump();
  EXPECT_EQ(events(path("moved.db"), "checkpoint_lost"), 0);
  Result alone = sh(hippo("alone.db") + "run " + spec("longer", longer) + " --workers 2");
  ASSERT_EQ(alone.status, 0) << alone.out;
  EXPECT_EQ(metrics_by_trial(trials(path("moved.db"), "longer")),
            metrics_by_trial(trials(path("alone.db"), "longer")));
}

// Issue 29 on the paths that move a state between storages. A first study keeps its states on
// w0's storage alone; one of those files is rewritten with zeroed parameters and a valid CRC
// before w0 drains, so the master's handover refuses it (its content hash is not the one w0
// reported): that copy is lost. The master keeps the others in its own directory, where they are
// then rewritten the same way; a later study's worker w1, on a storage of its own, fetches them
// through the master, and refuses each before using or keeping a byte. Every forged state is
// replayed, and the later study equals itself run alone, bit for bit.
TEST_F(Cluster, ForgedCopiesAreNeitherHandedOverNorFetched) {
  const std::string address = "ipc://" + path("master.sock"), db = path("cluster.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master")});
  const pid_t w0 = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", path("ck-w0"), "--name", "w0"});
  const std::string client = kHippo + " --master " + address + " ";
  ASSERT_EQ(sh(client + "submit " + spec("first", json::object()) + " --wait").status, 0);
  const std::vector<std::string> kept = checkpoint_names(path("ck-w0"));
  ASSERT_GE(kept.size(), 2u);
  ASSERT_TRUE(zero_parameters(path("ck-w0/") + kept[0]));
  Result drained = sh(client + "drain w0");
  ASSERT_EQ(drained.status, 0) << drained.out;
  EXPECT_EQ(exit_status_within(w0, 30), 0);
  const std::vector<std::string> handed = checkpoint_names(path("ck-master"));
  EXPECT_EQ(handed.size(), kept.size() - 1) << "the forged file is not handed over";
  for (const std::string& file : handed) EXPECT_TRUE(zero_parameters(path("ck-master/") + file));

  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck-w1"), "--name", "w1"});
  const json longer = {{"length", {{"epochs", 5}}}};
  Result r = sh(client + "--format json submit " + spec("longer", longer) + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  auto lost = [&](const std::string& words) {
    return std::stoll(sh("sqlite3 " + db +
                         " \"SELECT count(*) FROM events WHERE kind = 'checkpoint_lost' AND "
                         "detail LIKE '%" +
                         words + "%'\"")
                          .out);
  };
  EXPECT_EQ(lost("the one its producer reported"), 1) << "the handover's";
  EXPECT_GE(lost("fetched through the master"), 1);
  Result alone = sh(hippo("alone.db") + "run " + spec("longer", longer) + " --workers 2");
  ASSERT_EQ(alone.status, 0) << alone.out;
  EXPECT_EQ(metrics_by_trial(trials(db, "longer")),
            metrics_by_trial(trials(path("alone.db"), "longer")));
}

// A trainer that remembers the threads it was given in its states and refuses to go on from a
// state computed with other threads: a fork across environments fails its trial, saying so.
class Environments : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    setenv("PYTHONPATH", (kExamples + "/../python").c_str(), 1);  // the workers' trainers'
  }
  std::string external_spec(const std::string& name) {
    const std::string trainer = path("threads_checked.py");
    std::ofstream(trainer)
        << "import pickle\n"
           "import hippo\n"
           "def train(stage):\n"
           "    model = {'w': 1.0, 'threads': stage.threads}\n"
           "    def load(f):\n"
           "        saved = pickle.load(f)\n"
           "        if saved['threads'] != stage.threads:\n"
           "            raise RuntimeError(f\"forked across environments: a state of \"\n"
           "                               f\"{saved['threads']} threads, trained on with \"\n"
           "                               f\"{stage.threads}\")\n"
           "        model.update(saved)\n"
           "    stage.restore(load)\n"
           "    for step in stage.steps(evaluate=lambda: {'accuracy': model['w']},\n"
           "                            save=lambda f: pickle.dump(model, f)):\n"
           "        model['w'] *= 1 - stage.value('lr', step)\n"
           "hippo.serve(train)\n";
    return spec(name, {{"model",
                        {{"type", "external"},
                         {"hidden", nullptr},
                         {"command", {"/usr/bin/python3", trainer}}}}});
  }
  pid_t start_worker(const std::string& address, const std::string& name, int threads) {
    return spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck-" + name),
                  "--name", name, "--threads", std::to_string(threads), "--allow-exec", "trainer"});
  }
};

TEST_F(Environments, ATrialIsTrainedInTheEnvironmentOfItsFirstStage) {
  // Two roots (lr 0.1 and 0.05), each branching after its first epoch, on two workers whose
  // trainers get 1 and 2 threads: every branch goes on where its root was trained.
  const std::string address = "ipc://" + path("master.sock"), db = path("env.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master"),
         "--allow-exec", "trainer"});
  start_worker(address, "one", 1);
  start_worker(address, "two", 2);
  // Both connected before the study comes, so that each takes one root.
  for (int i = 0; i < 250; ++i) {
    Result w = sh(kHippo + " --master " + address + " --format json workers 2>/dev/null");
    if (w.status == 0 && json::parse(w.out).size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Result r = sh(kHippo + " --master " + address + " --format json submit " + external_spec("env") +
                " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const json& t : trials(db, "env")) EXPECT_EQ(t["status"], "done") << t.dump();
  // Both workers trained, and the plan says where each kept state was computed.
  Result workers = sh("sqlite3 " + db + " 'SELECT DISTINCT worker FROM executions ORDER BY 1'");
  EXPECT_EQ(workers.out, "one\ntwo\n");
  Result environments =
      sh("sqlite3 " + db + " 'SELECT DISTINCT environment FROM checkpoints ORDER BY 1'");
  EXPECT_EQ(environments.out, "cpu, 1 thread\ncpu, 2 threads\n");
}

TEST_F(Environments, WorkFromAStateOfAnEnvironmentNoWorkerHasWaitsForOne) {
  const std::string address = "ipc://" + path("master.sock"), db = path("env.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master"),
         "--allow-exec", "trainer", "--worker-timeout", "2"});
  // One worker trains the roots and their first states; then only a worker of other threads is
  // left: the study waits, saying why, until one like the first comes back.
  const pid_t first = start_worker(address, "one", 1);
  const std::string file = external_spec("env");
  const pid_t client =
      spawn({"/bin/sh", "-c", kHippo + " --master " + address + " submit " + file + " --wait"});
  for (int i = 0; i < 300 && std::stoll(sh("sqlite3 " + db +
                                           " 'SELECT count(*) FROM checkpoints' 2>/dev/null || "
                                           "echo 0")
                                            .out) == 0;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(first, SIGKILL);
  start_worker(address, "two", 2);
  for (int i = 0; i < 500 && events(db, "no_worker_for_environment") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(events(db, "no_worker_for_environment"), 1);
  EXPECT_EQ(json::parse(sh(kHippo + " --db " + db + " --format json studies").out)[0]["status"],
            "running");
  start_worker(address, "again", 1);
  EXPECT_EQ(exit_status_within(client, 60), 0);
  for (const json& t : trials(db, "env")) EXPECT_EQ(t["status"], "done") << t.dump();
}

}  // namespace
}  // namespace hippo::e2e
