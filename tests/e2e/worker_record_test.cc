// A worker's record of its latest job and how a job ends, against a real `hippo worker` process
// driven by a fake master (a ROUTER socket here, --insecure on both sides) and a real trainer
// process (a Python script that logs every step it trains, with the time): the record survives a
// SIGKILL and is in the next hello; a job goes on to its end when its master goes away and
// another one takes its address; a shutdown, a SIGTERM or an abandon stops the trainer within
// 0.2 s and the worker says the step it reached.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "protocol/content_hash.h"
#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

constexpr const char* kIncarnation = "0123456789abcdef";

// One step per `delay` seconds; after each: a line "STEP WALLCLOCK" in the log (argv[1]), a
// progress line, a metric where asked, a checkpoint where asked (written as a trainer must:
// a temporary file, then a rename).
constexpr const char* kTrainer = R"(import json, os, sys, time
stage = json.loads(sys.stdin.readline())
log = open(sys.argv[1], "a", buffering=1)
delay = float(sys.argv[2])
paths = {c["step"]: c["path"] for c in stage["checkpoints"]}
def say(line):
    print(json.dumps(line), flush=True)
for step in range(stage["from"] + 1, stage["to"] + 1):
    time.sleep(delay)
    log.write("%d %.6f\n" % (step, time.time()))
    say({"step": step})
    if step in stage["eval_steps"]:
        say({"step": step, "metric": "loss", "value": 1.0 / step})
    if step in paths:
        with open(paths[step] + ".tmp.0000000000000000", "w") as f:
            f.write("the state after %d steps\n" % step)
        os.rename(paths[step] + ".tmp.0000000000000000", paths[step])
        say({"checkpoint": step})
say({"done": True})
)";

// A master as far as one worker can tell: a ROUTER bound to `address` that records the worker's
// routing identity from its messages. `reset_heartbeats`: it answers heartbeats with reset, as a
// master that restarted does to a worker it does not know.
class FakeMaster {
 public:
  explicit FakeMaster(const std::string& address, bool reset_heartbeats = false)
      : router_(context_, zmq::socket_type::router), reset_heartbeats_(reset_heartbeats) {
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::router_handover, 1);
    router_.bind(address);
  }

  // The next message of this type (others are kept in `seen`), or null after `seconds`.
  json next(const std::string& type, double seconds = 20) {
    for (auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
         Clock::now() < deadline;) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0) continue;
      std::vector<zmq::message_t> frames;
      do {
        frames.emplace_back();
        (void)router_.recv(frames.back());
      } while (frames.back().more());
      if (frames.size() != 3) continue;
      peer_ = frames[0].to_string();
      json m = json::parse(frames[2].to_string(), nullptr, false);
      if (m.is_discarded()) continue;
      seen.push_back(m);
      if (reset_heartbeats_ && m["type"] == "heartbeat") send({{"v", 1}, {"type", "reset"}});
      if (m["type"] == type) return m;
    }
    return nullptr;
  }
  void send(const json& m) {
    router_.send(zmq::buffer(peer_), zmq::send_flags::sndmore);
    router_.send(zmq::message_t(), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(m.dump()), zmq::send_flags::none);
  }
  void welcome(int heartbeat_ms = 100) {
    send({{"v", 1},
          {"type", "welcome"},
          {"incarnation", kIncarnation},
          {"heartbeat_ms", heartbeat_ms}});
  }

  std::vector<json> seen;

 private:
  zmq::context_t context_;
  zmq::socket_t router_;
  std::string peer_;
  bool reset_heartbeats_;
};

class WorkerRecord : public E2ETest {
 protected:
  void SetUp() override {
    E2ETest::SetUp();
    std::ofstream(path("trainer.py")) << kTrainer;
  }
  std::string address() const { return "ipc://" + path("master.sock"); }
  std::string checkpoints() const { return path("ck"); }
  pid_t start_worker() {
    return spawn({kHippo, "worker", "--master", address(), "--checkpoints", checkpoints(), "--name",
                  "w", "--heartbeat-ms", "100", "--insecure", "--allow-exec", "trainer"});
  }
  // The record file of the worker (the only one on its storage: slot 0).
  std::string record_file() const { return checkpoints() + "/.hippo-last-job.0"; }

  // Job 1 of trial 3: the Python trainer, `delay` seconds a step, steps [0, to), evaluated and
  // snapshotted at `marks`.
  json job(int64_t to, double delay, const std::vector<int64_t>& marks) const {
    json snapshots = json::array();
    for (int64_t step : marks)
      snapshots.push_back(
          {{"step", step},
           {"state", step},
           {"file", "state-" + std::string(kIncarnation) + "-" + std::to_string(step) + ".ckpt"}});
    return {{"v", 1},
            {"type", "job"},
            {"job", 1},
            {"trial", 3},
            {"run",
             {{"model",
               {{"type", "external"},
                {"command",
                 {"python3", path("trainer.py"), path("trained.log"), std::to_string(delay)}}}},
              {"data", "toy"},
              {"train_samples", 0},  // an external model's own data set: lengths in steps
              {"eval_samples", 0},
              {"seed", 0},
              {"fixed", json::object()}}},
            {"hyperparameters", json::object()},
            {"from", 0},
            {"to", to},
            {"parent_state", -1},
            {"parent_file", ""},
            {"eval_steps", marks},
            {"snapshots", snapshots}};
  }

  // Every step the trainer trained, with the wall-clock time it ended.
  std::vector<std::pair<int64_t, double>> trained() const {
    std::vector<std::pair<int64_t, double>> out;
    std::istringstream lines(read_file(path("trained.log")));
    int64_t step;
    double at;
    while (lines >> step >> at) out.push_back({step, at});
    return out;
  }

  // The record says, for each snapshot, the file the trainer wrote and its content hash.
  void expect_snapshots(const json& record, const std::vector<int64_t>& steps) {
    ASSERT_EQ(record["snapshots"].size(), steps.size()) << record.dump();
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& s = record["snapshots"][i];
      EXPECT_EQ(s["step"], steps[i]);
      const std::string bytes = read_file(checkpoints() + "/" + s["file"].get<std::string>());
      EXPECT_EQ(bytes, "the state after " + std::to_string(steps[i]) + " steps\n");
      EXPECT_EQ(s["bytes"], bytes.size());
      EXPECT_EQ(s["checksum"], protocol::content_hash(bytes));
    }
  }
  void expect_metrics(const json& record, const std::vector<int64_t>& steps) {
    ASSERT_EQ(record["metrics"].size(), steps.size()) << record.dump();
    for (size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(record["metrics"][i]["step"], steps[i]);
      EXPECT_EQ(record["metrics"][i]["metrics"]["loss"], 1.0 / static_cast<double>(steps[i]));
    }
  }

  // Runs a long job, gives it up with `stop` once it has trained 20 steps, and checks that the
  // worker says Abandoned at the step it reached and that the trainer trained nothing 0.2 s after.
  // Returns the Abandoned message. Heartbeats are a second apart, as in a real cluster (a
  // trainer looked at only at heartbeats would train up to a second more).
  json give_up_mid_job(FakeMaster& master, const std::function<void()>& stop) {
    master.welcome(1000);
    master.send(job(100000, 0.01, {}));
    for (int i = 0; i < 1000 && trained().size() < 20; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double given_up =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    stop();
    json abandoned = master.next("abandoned", 10);
    EXPECT_FALSE(abandoned.is_null());
    if (abandoned.is_null()) return abandoned;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // anything trained after shows
    const std::vector<std::pair<int64_t, double>> steps = trained();
    EXPECT_FALSE(steps.empty());
    if (steps.empty()) return abandoned;
    const auto [last, at] = steps.back();
    // Training stopped within 0.2 s of the order (or signal) that gave the job up.
    EXPECT_LT(at - given_up, 0.2) << "trained until step " << last;
    std::printf("the trainer's last step ended %.3f s after its job was given up\n", at - given_up);
    EXPECT_EQ(abandoned["job"], 1);
    EXPECT_EQ(abandoned["incarnation"], kIncarnation);
    // The step reached is the trainer's last, less at most the one it trained while being killed.
    EXPECT_GE(abandoned["step"].get<int64_t>(), 20);
    EXPECT_LE(abandoned["step"].get<int64_t>(), last);
    EXPECT_GE(abandoned["step"].get<int64_t>(), last - 1);
    return abandoned;
  }
};

// A worker SIGKILLed mid-job, started again on the same checkpoint directory, says in its first
// hello what the job did: the snapshots it wrote with their content hashes, the metrics, the step
// reached. A welcome removes the record; a corrupt record is ignored and removed, never a crash.
TEST_F(WorkerRecord, TheRecordSurvivesAKillAndGoesInTheNextHello) {
  FakeMaster master(address());
  pid_t worker = start_worker();
  json hello = master.next("hello");
  ASSERT_FALSE(hello.is_null()) << log_of(worker);
  EXPECT_FALSE(hello.contains("dropped")) << hello.dump();  // nothing yet
  master.welcome();
  master.send(job(400, 0.02, {5, 10}));
  ASSERT_FALSE(master.next("snapshot").is_null()) << log_of(worker);
  json second = master.next("snapshot");
  ASSERT_FALSE(second.is_null()) << log_of(worker);
  ASSERT_EQ(second["step"], 10);
  // The record's reached step (written at most once per heartbeat interval) goes past 10.
  auto reached = [&] {
    json r = json::parse(read_file(record_file()), nullptr, false);
    return r.is_object() ? r.value("reached", 0) : 0;
  };
  for (int i = 0; i < 100 && reached() <= 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(worker, SIGKILL);
  waitpid(worker, nullptr, 0);

  struct stat st {};
  ASSERT_EQ(stat(record_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  pid_t again = start_worker();
  hello = master.next("hello");
  ASSERT_FALSE(hello.is_null()) << log_of(again);
  ASSERT_EQ(hello["dropped"].size(), 1u) << hello.dump();
  const json record = hello["dropped"][0];
  EXPECT_EQ(record["job"], 1);
  EXPECT_EQ(record["trial"], 3);
  EXPECT_EQ(record["incarnation"], kIncarnation);
  EXPECT_EQ(record["from"], 0);
  EXPECT_EQ(record["to"], 400);
  EXPECT_FALSE(record.value("done", false));
  EXPECT_EQ(record["reported"], 10);
  EXPECT_GT(record["reached"].get<int64_t>(), 10);
  EXPECT_LE(record["reached"].get<int64_t>(), trained().back().first);
  EXPECT_GT(record["busy_s"].get<double>(), 0.2);
  expect_snapshots(record, {5, 10});
  expect_metrics(record, {5, 10});

  master.welcome();
  for (int i = 0; i < 100 && fs::exists(record_file()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(fs::exists(record_file())) << "a welcome answered the hello that carried it";

  // A record that is not one (a crash mid-write cannot make it: it is renamed whole; someone
  // else's file can): ignored, removed, and the worker serves on.
  kill(again, SIGKILL);
  waitpid(again, nullptr, 0);
  std::ofstream(record_file()) << R"({"job": 1, "trial": 3, "from": 0, "to": 4, "reported": 9)";
  pid_t third = start_worker();
  hello = master.next("hello");
  ASSERT_FALSE(hello.is_null()) << log_of(third);
  EXPECT_FALSE(hello.contains("dropped")) << hello.dump();
  EXPECT_FALSE(fs::exists(record_file()));
  EXPECT_NE(log_of(third).find("not the record of a job"), std::string::npos) << log_of(third);
  EXPECT_EQ(waitpid(third, nullptr, WNOHANG), 0);
}

// The master goes away mid-job and another one binds its address (a restart): the job goes on to
// its end, every step trained once, and the worker says hello only then, with a record that has
// the job done, every snapshot with its hash and every metric.
TEST_F(WorkerRecord, AJobGoesOnToItsEndWhenItsMasterGoesAway) {
  pid_t worker = start_worker();
  {
    FakeMaster master(address());
    ASSERT_FALSE(master.next("hello").is_null()) << log_of(worker);
    master.welcome();
    master.send(job(40, 0.025, {10, 20, 30, 40}));
    ASSERT_FALSE(master.next("metric").is_null()) << log_of(worker);
  }  // gone
  FakeMaster restarted(address(), /*reset_heartbeats=*/true);
  json hello = restarted.next("hello");
  ASSERT_FALSE(hello.is_null()) << log_of(worker);
  ASSERT_EQ(hello["dropped"].size(), 1u) << hello.dump();
  const json record = hello["dropped"][0];
  EXPECT_TRUE(record.value("done", false)) << "said hello before its job ended: " << record.dump();
  EXPECT_EQ(record["reached"], 40);
  EXPECT_EQ(record["reported"], 40);
  expect_snapshots(record, {10, 20, 30, 40});
  expect_metrics(record, {10, 20, 30, 40});
  // The new master answered the heartbeats of the running job with reset: the job went on.
  bool reset_mid_job = false;
  for (const json& m : restarted.seen)
    reset_mid_job = reset_mid_job || (m["type"] == "heartbeat" && m.value("job", -1) == 1);
  EXPECT_TRUE(reset_mid_job) << "no heartbeat of the running job reached the new master";

  std::vector<int64_t> steps;
  for (const auto& [step, at] : trained()) steps.push_back(step);
  ASSERT_EQ(steps.size(), 40u);
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(steps[static_cast<size_t>(i)], i + 1);
  EXPECT_NE(log_of(worker).find("goes on to its end"), std::string::npos) << log_of(worker);
}

// The engine's snapshots are recorded as the trainer's are: the file, its size and content hash.
// A reset (the master restarted while the worker was idle) gets a hello with the record.
TEST_F(WorkerRecord, AnEngineJobsRecordNamesItsSnapshotsWithTheirHashes) {
  FakeMaster master(address());
  pid_t worker = start_worker();
  ASSERT_FALSE(master.next("hello").is_null()) << log_of(worker);
  master.welcome();
  json snapshots = json::array();
  for (int64_t step : {4, 8})
    snapshots.push_back(
        {{"step", step},
         {"state", step},
         {"file", "state-" + std::string(kIncarnation) + "-" + std::to_string(step) + ".ckpt"}});
  master.send(small_job(snapshots));
  json done = master.next("done");
  ASSERT_FALSE(done.is_null()) << log_of(worker);
  master.send({{"v", 1}, {"type", "reset"}});
  json hello = master.next("hello");
  ASSERT_FALSE(hello.is_null()) << log_of(worker);
  ASSERT_EQ(hello["dropped"].size(), 1u) << hello.dump();
  const json record = hello["dropped"][0];
  EXPECT_TRUE(record.value("done", false));
  EXPECT_EQ(record["reached"], 8);
  ASSERT_EQ(record["snapshots"].size(), 2u) << record.dump();
  for (const json& s : record["snapshots"]) {
    const std::string bytes = read_file(checkpoints() + "/" + s["file"].get<std::string>());
    EXPECT_EQ(s["bytes"], bytes.size());
    EXPECT_EQ(s["checksum"], protocol::content_hash(bytes));
  }
  ASSERT_EQ(record["metrics"].size(), 1u);
  EXPECT_EQ(record["metrics"][0]["step"], 8);
  EXPECT_TRUE(record["metrics"][0]["metrics"].contains("accuracy"));
}

// Shutdown mid-job: the trainer stops within 0.2 s, the worker says Abandoned at the step reached,
// its record says the same, and it exits.
TEST_F(WorkerRecord, AShutdownMidJobSaysTheStepReached) {
  FakeMaster master(address());
  pid_t worker = start_worker();
  ASSERT_FALSE(master.next("hello").is_null()) << log_of(worker);
  json abandoned = give_up_mid_job(master, [&] { master.send({{"v", 1}, {"type", "shutdown"}}); });
  ASSERT_FALSE(abandoned.is_null()) << log_of(worker);
  EXPECT_EQ(exit_status_within(worker, 5), 0) << log_of(worker);
  const json record = json::parse(read_file(record_file()));
  EXPECT_FALSE(record.value("done", false));
  EXPECT_EQ(record["reached"], abandoned["step"]);
}

// The same for the worker's own SIGTERM: it reports before it stops.
TEST_F(WorkerRecord, ASigtermMidJobSaysTheStepReached) {
  FakeMaster master(address());
  pid_t worker = start_worker();
  ASSERT_FALSE(master.next("hello").is_null()) << log_of(worker);
  ASSERT_FALSE(give_up_mid_job(master, [&] { kill(worker, SIGTERM); }).is_null()) << log_of(worker);
  EXPECT_EQ(exit_status_within(worker, 5), 0) << log_of(worker);
}

// An abandon order kills the trainer within 0.2 s; the worker serves on.
TEST_F(WorkerRecord, AnAbandonedTrainerStopsWithin200Ms) {
  FakeMaster master(address());
  pid_t worker = start_worker();
  ASSERT_FALSE(master.next("hello").is_null()) << log_of(worker);
  ASSERT_FALSE(give_up_mid_job(master,
                               [&] {
                                 master.send({{"v", 1}, {"type", "abandon"}, {"job", 1}});
                               })
                   .is_null())
      << log_of(worker);
  EXPECT_EQ(waitpid(worker, nullptr, WNOHANG), 0) << log_of(worker);
}

}  // namespace
}  // namespace hippo::e2e
