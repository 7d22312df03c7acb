// Reliability end to end (real processes, sockets, SQLite files and checkpoint files): external
// trainers and --allow-exec, lost and corrupt checkpoints, a full disk, a locked search plan.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "tests/e2e/e2e_helper.h"

namespace {

using namespace hippo::e2e;
using namespace std::chrono_literals;

class Reliability : public E2ETest {};

// The example external trainer (numpy softmax regression) through the stage tree: the study
// shares its first epochs like the built-in engine does, and every trial's metrics equal those of
// the trial-based run, where each trial trains alone.
TEST_F(Reliability, ExternalTrainerSharesStagesExactly) {
  std::string root = "cd " + kExamples + "/.. && ";
  std::string file = kExamples + "/external-trainer.json";
  Result shared = sh(root + hippo("shared.db") + "--format json run " + file +
                     " --workers 2 --allow-exec trainer");
  ASSERT_EQ(shared.status, 0) << shared.out;
  Result alone = sh(root + hippo("alone.db") + "--format json run " + file +
                    " --workers 2 --allow-exec trainer --policy trial-based");
  ASSERT_EQ(alone.status, 0) << alone.out;
  json s = last_json(shared.out), t = last_json(alone.out);
  EXPECT_EQ(s["trials"], 4);
  EXPECT_EQ(s["steps_executed"], s["steps_unique"]);
  EXPECT_LT(s["steps_executed"], t["steps_executed"]);
  EXPECT_EQ(t["steps_executed"], s["steps_trial_based"]);
  EXPECT_EQ(s["best"], t["best"]);
  EXPECT_GT(s["best"]["value"].get<double>(), 0.7);

  json a = trials(path("shared.db"), "fmnist-logreg-external");
  json b = trials(path("alone.db"), "fmnist-logreg-external");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(metrics_by_trial(a), metrics_by_trial(b));
  for (const json& trial : a) {
    EXPECT_EQ(trial["status"], "done");
    EXPECT_EQ(trial["metrics"].size(), 3u * 2u);  // accuracy and loss after epochs 1, 2, 3
  }
  EXPECT_EQ(files_not_retained(path("shared.db"), path("shared.db.checkpoints")),
            std::vector<std::string>{});
}

// Issue 29 with an external trainer, whose checkpoint format is its own: the worker hashes each
// file once the trainer says it is written, and checks the input file's hash before a trainer is
// given it (the worker is the trust boundary; the trainer's loader checks nothing). Every kept
// file of a first study is changed in its middle; a longer study from them replays them instead of
// training on them, and equals itself run alone.
TEST_F(Reliability, ExternalTrainerInputIsCheckedByItsContentHash) {
  std::string root = "cd " + kExamples + "/.. && ";
  json longer = json::parse(std::ifstream(kExamples + "/external-trainer.json"));
  longer["name"] = "longer";
  longer["length"]["epochs"] = 4;
  const std::string longer_file = path("longer.json");
  std::ofstream(longer_file) << longer.dump();
  const std::string options = " --workers 2 --allow-exec trainer";
  Result alone = sh(root + hippo("alone.db") + "--format json run " + longer_file + options);
  ASSERT_EQ(alone.status, 0) << alone.out;
  Result first = sh(root + hippo("plan.db") + "--format json run " + kExamples +
                    "/external-trainer.json" + options);
  ASSERT_EQ(first.status, 0) << first.out;
  const std::string dir = path("plan.db.checkpoints");
  const std::vector<std::string> kept = checkpoint_names(dir);
  ASSERT_FALSE(kept.empty());
  for (const std::string& name : kept) {
    std::fstream f(dir + "/" + name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(dir + "/" + name) / 2));
    f.write("\0\0\0\0\0\0\0\0", 8);
    ASSERT_TRUE(f.good()) << name;
  }
  Result second = sh(root + hippo("plan.db") + "--format json run " + longer_file + options);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_GE(std::stoll(sh("sqlite3 " + path("plan.db") +
                          " \"SELECT count(*) FROM events WHERE kind = 'checkpoint_lost' AND "
                          "detail LIKE '%content hash%'\"")
                           .out),
            1);
  EXPECT_EQ(metrics_by_trial(trials(path("plan.db"), "longer")),
            metrics_by_trial(trials(path("alone.db"), "longer")));
}

// No command runs unless the operator allowed it: `hippo run` refuses the spec at once; a trainer
// that misbehaves fails its trials with a message that says how, and nothing crashes.
TEST_F(Reliability, ExternalTrainerNeedsAllowExecAndFailsCleanly) {
  auto external = [&](const std::string& name, const json& command) {
    return spec(name, {{"model", {{"type", "external"}, {"command", command}, {"hidden", nullptr}}},
                       {"fixed", {{"optimizer", nullptr}}}});
  };
  std::string marker = path("ran");
  std::string refused = external("refused", {"/usr/bin/touch", marker});
  Result r = sh(hippo("a.db") + "run " + refused + " --workers 1 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("model.command: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--allow-exec trainer"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(sh(hippo("a.db") + "--format json studies").out, "[]\n");  // nothing was made
  Result wrong = sh(hippo("b.db") + "run " + refused + " --workers 1 --allow-exec everything 2>&1");
  EXPECT_EQ(wrong.status, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("--allow-exec: expected the kinds"), std::string::npos) << wrong.out;

  const std::vector<std::pair<json, std::string>> broken = {
      {{"/bin/sh", "-c", "echo 'not json'"}, "expected one JSON object on one line"},
      {{"/bin/sh", "-c", "echo oops >&2; exit 3"},
       "exited with status 3; its stderr ends with: oops"},
      {{"/bin/sh", "-c", "cat >/dev/null; echo '{\"done\": true}'"}, "done, but no metrics came"},
      {{path("no-such-trainer")}, "cannot run"},
  };
  int i = 0;
  for (const auto& [command, message] : broken) {
    std::string name = "broken" + std::to_string(i++);
    Result b = sh(hippo(name + ".db") + "run " + external(name, command) +
                  " --workers 1 --allow-exec trainer 2>&1");
    EXPECT_EQ(b.status, 1) << b.out;
    EXPECT_NE(b.out.find(message), std::string::npos) << message << "\n" << b.out;
  }
}

// Checkpoints corrupted (bytes flipped) or deleted while the study runs: a worker that cannot
// load its parent reports the file lost, the master forgets it and replays the state from the
// nearest earlier one. The study ends with the metrics of an undisturbed run; the replays show
// as steps executed beyond the unique steps.
TEST_F(Reliability, CorruptAndDeletedCheckpointsAreReplayed) {
  std::string file = small_study("rot");
  Result calm = sh(hippo("calm.db") + "--format json run " + file + " --workers 1");
  ASSERT_EQ(calm.status, 0) << calm.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("rot.db"), checkpoints = path("ck");
  fs::create_directories(checkpoints);
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints,
         "--snapshot-every", "8"});
  // One state in memory: a sibling stage must load its parent from the file.
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "w",
         "--cache", "1"});
  std::atomic<bool> done{false};
  int flipped = 0, deleted = 0;
  std::thread rot([&] {
    std::set<std::string> seen;
    while (!done) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
        std::string name = entry.path().filename().string();
        if (entry.path().extension() != ".ckpt" || !seen.insert(name).second) continue;
        if (seen.size() % 2 == 0) {
          std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
          f.seekp(100);
          f.write("\xde\xad\xbe\xef", 4);
          flipped += f.good();
        } else {
          deleted += fs::remove(entry.path(), ec);
        }
      }
      std::this_thread::sleep_for(2ms);
    }
  });
  Result r = sh(kHippo + " --master " + address + " --format json submit " + file + " --wait");
  done = true;
  rot.join();
  ASSERT_EQ(r.status, 0) << r.out;
  json s = last_json(r.out), c = last_json(calm.out);
  EXPECT_GT(flipped, 0);
  EXPECT_GT(deleted, 0);
  EXPECT_GE(events(db, "checkpoint_lost"), 1);
  EXPECT_EQ(s["steps_unique"], c["steps_unique"]);
  EXPECT_GT(s["steps_executed"], s["steps_unique"]);  // the replays
  std::printf("files corrupted %d, deleted %d; %s\n", flipped, deleted, s.dump().c_str());
  EXPECT_EQ(metrics_by_trial(trials(db, "rot")), metrics_by_trial(trials(path("calm.db"), "rot")));
}

// The master killed, and every checkpoint deleted before it starts again: it forgets the lost
// files (their rows go, with an event) and replays what the rest of the study needs.
TEST_F(Reliability, RestartWithoutCheckpointsReplays) {
  std::string file = small_study("gone");
  Result calm = sh(hippo("calm.db") + "--format json run " + file + " --workers 1");
  ASSERT_EQ(calm.status, 0) << calm.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("gone.db"), checkpoints = path("ck");
  std::vector<std::string> master = {
      kHippo,  "--db",          db,          "master",           "--bind",
      address, "--checkpoints", checkpoints, "--snapshot-every", "8"};
  pid_t first = spawn(master);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "w"});
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + file + " >/dev/null").status, 0);
  // A metric can be committed before the first checkpoint row: wait for both, then kill.
  wait_for_a_metric(db, "gone");
  auto checkpoint_rows = [&] {
    return std::stoll(
        sh("sqlite3 -cmd '.timeout 5000' " + db + " 'SELECT count(*) FROM checkpoints'").out);
  };
  for (int i = 0; i < 500 && checkpoint_rows() == 0; ++i) std::this_thread::sleep_for(10ms);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  int64_t rows = checkpoint_rows();
  ASSERT_GT(rows, 0);
  // The files go, not the directory: the worker still writes into it (files nobody knows of).
  for (const std::string& file : checkpoint_names(checkpoints))
    fs::remove(checkpoints + "/" + file);
  spawn(master);
  EXPECT_EQ(wait_for_end(db, 60), "done");
  EXPECT_EQ(events(db, "checkpoint_lost"), rows);
  EXPECT_EQ(metrics_by_trial(trials(db, "gone")),
            metrics_by_trial(trials(path("calm.db"), "gone")));
}

// A worker whose disk is full (a file-size limit with SIGXFSZ ignored: write() fails with EFBIG,
// through the same path as ENOSPC): its checkpoint writes fail, it reports the stage, leaves no
// partial file, and keeps running; the master gives the stage to the other worker. The study
// ends with the metrics of an undisturbed run.
TEST_F(Reliability, FullDiskFailsTheStageAndAnotherWorkerRetries) {
  std::string file = small_study("full");
  Result calm = sh(hippo("calm.db") + "--format json run " + file + " --workers 1");
  ASSERT_EQ(calm.status, 0) << calm.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("full.db"), checkpoints = path("ck");
  pid_t master =
      spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints});
  // The full one's name sorts first, so it is the first to be given work.
  pid_t full = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "a-full"},
      [] {
        signal(SIGXFSZ, SIG_IGN);  // ignored dispositions survive exec
        rlimit limit{64 * 1024, 64 * 1024};
        setrlimit(RLIMIT_FSIZE, &limit);
      });
  std::this_thread::sleep_for(300ms);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "b-fine"});
  Result r = sh(kHippo + " --master " + address + " --format json submit " + file + " --wait");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GE(events(db, "stage_retry"), 1) << log_of(master);
  EXPECT_NE(log_of(master).find("File too large"), std::string::npos) << log_of(master);
  EXPECT_EQ(waitpid(full, nullptr, WNOHANG), 0);  // still running
  for (const auto& entry : fs::directory_iterator(checkpoints))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  EXPECT_EQ(metrics_by_trial(trials(db, "full")),
            metrics_by_trial(trials(path("calm.db"), "full")));
}

// Another process holds the search plan's write lock (BEGIN EXCLUSIVE in sqlite3) while a study
// runs: the master says the plan is locked, keeps the workers' messages in order and retries
// them, answers queries meanwhile, and the study ends as an undisturbed one does.
TEST_F(Reliability, LockedSearchPlanIsWaitedFor) {
  // Six epochs: the study must still be training when the lock is taken (three ended first once).
  std::string file = spec("locked", {{"model", {{"hidden", {256, 128}}}},
                                     {"data", {{"train_samples", 4096}, {"eval_samples", 512}}},
                                     {"length", {{"epochs", 6}}}});
  Result calm = sh(hippo("calm.db") + "--format json run " + file + " --workers 1");
  ASSERT_EQ(calm.status, 0) << calm.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("locked.db"), checkpoints = path("ck");
  pid_t master =
      spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints});
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "w"});
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + file + " >/dev/null").status, 0);
  wait_for_a_metric(db, "locked");
  // The busy timeout: BEGIN EXCLUSIVE waits out a write of the master's instead of failing.
  const std::string lock_for_7s =
      "(echo '.timeout 10000'; echo 'BEGIN EXCLUSIVE;'; sleep 7; echo 'COMMIT;') | sqlite3 " + db;
  pid_t locker = spawn({"/bin/sh", "-c", lock_for_7s});
  std::this_thread::sleep_for(1s);
  // Queries still answer: from the file (readers are not blocked in WAL mode), and from the
  // master between its attempts to write.
  auto started = std::chrono::steady_clock::now();
  Result studies = sh(kHippo + " --db " + db + " --master " + address + " --format json studies");
  EXPECT_EQ(studies.status, 0);
  EXPECT_EQ(json::parse(studies.out)[0]["status"], "running");
  EXPECT_TRUE(protocol_status(address, "locked").is_null());  // answered: still running
  EXPECT_LT(std::chrono::steady_clock::now() - started, 6s);
  waitpid(locker, nullptr, 0);

  EXPECT_EQ(wait_for_end(db, 60), "done");
  std::string log = log_of(master);
  EXPECT_NE(log.find("held the write lock"), std::string::npos) << log;
  EXPECT_NE(log.find("writable again"), std::string::npos) << log;
  EXPECT_EQ(metrics_by_trial(trials(db, "locked")),
            metrics_by_trial(trials(path("calm.db"), "locked")));
}

}  // namespace

// The master dies after a job's last state was reported (metric and snapshot in the plan) and
// before its "done": the restarted master has nothing left to train for that trial, and closes it
// itself (before, the trial stayed "running" and the study never ended). The worker is a fake on
// a real DEALER socket, so that the master can be killed exactly in that window.
TEST_F(Reliability, TrialWhoseLastStateCameBeforeARestartCloses) {
  // One trial of one stage (a constant learning rate).
  std::string file = spec("one", {{"hyperparameters", constant_lr({0.1})}});
  std::string address = "ipc://" + path("master.sock"), db = path("plan.db"), ck = path("ck");
  std::vector<std::string> master = {kHippo,  "--db",          db, "master", "--bind",
                                     address, "--checkpoints", ck};
  pid_t first = spawn(master);

  zmq::context_t context;
  zmq::socket_t worker(context, zmq::socket_type::dealer);
  worker.set(zmq::sockopt::linger, 0);
  worker.set(zmq::sockopt::rcvtimeo, 10000);
  use_local_key(worker);  // the operator's own (fake) worker
  worker.connect(address);
  auto send = [&](json m) {
    m["v"] = 1;
    std::string body = m.dump();
    worker.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    worker.send(zmq::buffer(body), zmq::send_flags::none);
  };
  auto receive = [&](const std::string& type) {  // the next message of that type, or null
    for (int i = 0; i < 100; ++i) {
      zmq::message_t delimiter, body;
      if (!worker.recv(delimiter) || !worker.recv(body)) return json(nullptr);
      json m = json::parse(body.to_string());
      if (m["type"] == type) return m;
    }
    return json(nullptr);
  };
  send({{"type", "hello"},
        {"name", "fake"},
        {"device", "cpu"},
        {"threads", 1},
        {"pid", getpid()},
        {"held", json::array()}});
  const json welcome = receive("welcome");
  ASSERT_FALSE(welcome.is_null());
  const json incarnation = welcome["incarnation"];  // every report on a job carries it
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + file + " >/dev/null").status, 0);
  json job = receive("job");
  ASSERT_FALSE(job.is_null());

  // The stage's evaluations and its last state, as a worker reports them (the checkpoint file
  // exists: the restarted master forgets states whose file is missing), but no "done".
  const int64_t to = job["to"];
  const json order = job["snapshots"].back();
  ASSERT_EQ(order["step"], to) << job.dump();
  std::ofstream(ck + "/" + order["file"].get<std::string>()) << "a checkpoint";
  for (const json& step : job["eval_steps"])
    send({{"type", "metric"},
          {"job", job["job"]},
          {"step", step},
          {"metrics", {{"accuracy", 0.5}, {"loss", 1.0}}},
          {"incarnation", incarnation}});
  send({{"type", "snapshot"},
        {"incarnation", incarnation},
        {"job", job["job"]},
        {"step", to},
        {"state", order["state"]},
        {"file", order["file"]},
        {"bytes", 12},
        {"checksum", std::string(64, 'a')}});  // a file's content hash is required
  bool recorded = false;
  for (int i = 0; i < 500 && !recorded; ++i) {
    recorded = sh("sqlite3 " + db + " \"SELECT count(*) FROM checkpoints\"").out == "1\n";
    if (!recorded) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(recorded);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);

  spawn(master);
  EXPECT_EQ(wait_for_end(db, 10), "done");
  json t = trials(db, "one");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0]["status"], "done");
}
