// Every study ends, and says why, with the real hippo and hippo-worker
// processes: a diverging trial is a result and its study goes on; a trainer without the study's
// metric fails its trials saying so; a run interrupted (Ctrl-C) or killed leaves its study
// resumable and no worker behind, and a later run on the same plan (a study sharing the tree, the
// resume) ends every study with the metrics of an undisturbed run; a worker that cannot write its
// checkpoints is set aside; a drain on a worker's own disk hands its states over and replays
// nothing; a master killed between a commit and its messages resumes.
#include <signal.h>
#include <sys/resource.h>

#include "storage/plan.h"
#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Lifecycle : public E2ETest {
 protected:
  // The CI example, long enough (a few seconds on two workers) for a run to be under way when a
  // test acts on it.
  std::string longer(const std::string& name, const json& changes = json::object()) {
    json patch = {{"model", {{"hidden", {128}}}},
                  {"data", {{"train_samples", 8192}, {"eval_samples", 512}}},
                  {"length", {{"epochs", 4}}}};
    patch.merge_patch(changes);
    return spec(name, patch);
  }
  // The metrics of a spec's trials when it runs alone and undisturbed on a plan of its own.
  std::map<int64_t, std::string> calm(const std::string& file, const std::string& name) {
    Result r = sh(hippo("calm-" + name + ".db") + "run " + file + " --workers 2 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    return metrics_by_trial(trials(path("calm-" + name + ".db"), name));
  }
  // The worker processes a `hippo run` started (their names are run-<its pid>-<i>).
  int workers_of_run(pid_t run) {
    // ([r]: the pattern does not match the shell that runs pgrep.)
    Result r = sh("pgrep -f -- '--name [r]un-" + std::to_string(run) + "-' | wc -l");
    return std::stoi(r.out);
  }
  // Waits up to `seconds` for the workers of a run to be gone; how many are left.
  int workers_left_after(pid_t run, double seconds) {
    for (int i = 0; i < seconds * 10; ++i) {
      if (workers_of_run(run) == 0) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return workers_of_run(run);
  }
  json study_row(const std::string& db, const std::string& name) {
    for (const json& s : json::parse(sh(kHippo + " --db " + db + " --format json studies").out))
      if (s["name"] == name) return s;
    return nullptr;
  }
};

// A grid with a learning rate of 10^6: that trial's loss is NaN at its first evaluation. The run
// ends done, the trial is `diverged` where it diverged (its job stopped there), it is never the
// best, and every other trial is, bit for bit, what it is in the grid without it.
TEST_F(Lifecycle, ADivergingTrialIsAResultAndTheOthersAreAsWithoutIt) {
  const std::string with = spec("with", {{"hyperparameters", constant_lr({0.1, 1e6, 0.05})}});
  const std::string without = spec("without", {{"hyperparameters", constant_lr({0.1, 0.05})}});
  Result a = sh(hippo("with.db") + "--format json run " + with + " --workers 2 2>&1");
  ASSERT_EQ(a.status, 0) << a.out;
  const json summary = last_json(a.out);
  EXPECT_EQ(summary["status"], "done");
  EXPECT_NE(summary["best"]["params"]["lr"], 1e6);
  Result b = sh(hippo("without.db") + "--format json run " + without + " --workers 2 2>&1");
  ASSERT_EQ(b.status, 0) << b.out;
  const json ta = trials(path("with.db"), "with"), tb = trials(path("without.db"), "without");
  ASSERT_EQ(ta.size(), 3u);
  EXPECT_EQ(ta[1]["status"], "diverged");
  EXPECT_EQ(ta[1]["end_step"], 32);  // its first evaluation: one epoch of 2048 / 64 steps
  EXPECT_NE(ta[1]["diverged"].get<std::string>().find("accuracy is nan at step 32"),
            std::string::npos)
      << ta[1];
  EXPECT_EQ(ta[0]["metrics"], tb[0]["metrics"]);
  EXPECT_EQ(ta[2]["metrics"], tb[1]["metrics"]);
  EXPECT_EQ(ta[0]["status"], "done");
  EXPECT_EQ(ta[2]["status"], "done");
  // Its job stopped at the diverged state: nothing after it was trained.
  int64_t reached = -1;
  for (const ExecutionRow& e : SearchPlan::open_read_only(path("with.db")).executions(std::nullopt))
    if (e.trial == ta[1]["trial"].get<int64_t>() - 1) reached = e.reached;
  EXPECT_EQ(reached, 32);
  Result best = sh(hippo("with.db") + "--format json best with");
  EXPECT_NE(json::parse(best.out)["params"]["lr"], 1e6);
}

// Issue 46's counterexample: median_stop in max mode, min_trials 2, one trial at a time,
// evaluations at 6/12/18/24 given by a trainer that serves fixed curves. Trial 1 diverges at 12: it
// never completed (Optuna counts it FAIL), so when trial 2 reports 0.45 at 18 only one trial has
// completed and trial 2 is not judged; it trains to its length. (Counted as completed, trial 1
// made the median at 18 trial 0's 0.8, and trial 2 was stopped there.)
TEST_F(Lifecycle, ADivergedTrialNeverCountsAsCompletedForMedianStop) {
  const std::string trainer = path("curves.py");
  std::ofstream(trainer)
      << "import math, pickle\n"
         "import hippo\n"
         "CURVES = [[0.6, 0.7, 0.8, 0.85], [0.5, math.nan], [0.3, 0.4, 0.45, 0.5]]\n"
         "def train(stage):\n"
         "    model = {}\n"
         "    stage.restore(lambda f: model.update(pickle.load(f)))\n"
         "    for step in stage.steps(save=lambda f: pickle.dump(model, f)):\n"
         "        if step + 1 in stage.eval_steps:\n"
         "            curve = CURVES[int(stage.value('curve', step))]\n"
         "            stage.report(step + 1, accuracy=curve[(step + 1) // 6 - 1])\n"
         "hippo.serve(train)\n";
  const std::string file = spec(
      "curves",
      {{"model",
        {{"type", "external"}, {"hidden", nullptr}, {"command", {"/usr/bin/python3", trainer}}}},
       {"data", {{"name", "curves"}, {"train_samples", nullptr}, {"eval_samples", nullptr}}},
       {"hyperparameters", {{"lr", nullptr}, {"curve", {{"grid", {0, 1, 2}}}}}},
       {"searcher", {{"name", "median_stop"}, {"min_trials", 2}, {"parallel", 1}}},
       {"length", {{"epochs", nullptr}, {"steps", 24}}},
       {"eval", {{"every", {{"epochs", nullptr}, {"steps", 6}}}}}});
  Result r = sh("PYTHONPATH=" + kExamples + "/../python " + hippo("m.db") + "--format json run " +
                file + " --workers 1 --allow-exec trainer 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const json t = trials(path("m.db"), "curves");
  ASSERT_EQ(t.size(), 3u) << t;
  EXPECT_EQ(t[0]["status"], "done");
  EXPECT_EQ(t[1]["status"], "diverged");
  EXPECT_EQ(t[2]["status"], "done") << t[2];
  EXPECT_EQ(t[2]["metrics"].size(), 4u) << t[2];  // 6, 12, 18 and 24
}

// A trainer that reports its loss and never the study's metric (accuracy): each trial fails,
// naming the metric, the step and what came instead; the study fails with that message and the
// run exits 1.
TEST_F(Lifecycle, ATrainerWithoutTheStudysMetricFailsTheRunSayingSo) {
  const std::string trainer = path("loss_only.py");
  std::ofstream(trainer) << "import pickle\n"
                            "import hippo\n"
                            "def train(stage):\n"
                            "    model = {'w': 1.0}\n"
                            "    stage.restore(lambda f: model.update(pickle.load(f)))\n"
                            "    for step in stage.steps(evaluate=lambda: {'loss': model['w']},\n"
                            "                            save=lambda f: pickle.dump(model, f)):\n"
                            "        model['w'] *= 1 - stage.value('lr', step)\n"
                            "hippo.serve(train)\n";
  const std::string file = spec(
      "loss-only",
      {{"model",
        {{"type", "external"}, {"hidden", nullptr}, {"command", {"/usr/bin/python3", trainer}}}}});
  Result r = sh("PYTHONPATH=" + kExamples + "/../python " + hippo("m.db") + "--format json run " +
                file + " --workers 1 --allow-exec trainer 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  const json summary = last_json(r.out);
  EXPECT_EQ(summary["status"], "failed");
  EXPECT_NE(summary["error"].get<std::string>().find(
                "no accuracy at step 32 (the trainer reported loss)"),
            std::string::npos)
      << summary;
  for (const json& t : trials(path("m.db"), "loss-only")) {
    EXPECT_EQ(t["status"], "failed");
    EXPECT_NE(t["error"].get<std::string>().find("no accuracy at step 32"), std::string::npos);
  }
}

// Ctrl-C on a run: its study is `interrupted` (not failed), its workers are gone, and the run says
// how to resume. A study sharing the tree runs on the same plan meanwhile (nothing of the first
// run crashes it), then the first is resumed: both end done, each with the metrics of an
// undisturbed run of it.
TEST_F(Lifecycle, AnInterruptedRunIsResumedAfterAStudySharingItsTree) {
  const std::string first = longer("first");
  const std::string second =
      longer("second", {{"hyperparameters", {{"lr", {{"init", {{"grid", {0.1, 0.02}}}}}}}}});
  const auto calm_first = calm(first, "first"), calm_second = calm(second, "second");

  const std::string db = path("plan.db"), out = path("first.out");
  const pid_t run = spawn({"/bin/sh", "-c",
                           "exec " + hippo("plan.db") + "--format json run " + first +
                               " --workers 2 > " + out + " 2>&1"});
  wait_for_a_metric(db, "first");
  kill(run, SIGINT);
  EXPECT_EQ(exit_status_within(run, 30), 1) << read_file(out);
  EXPECT_EQ(workers_left_after(run, 5), 0);
  EXPECT_EQ(last_json(read_file(out))["status"], "interrupted");
  EXPECT_NE(read_file(out).find("hippo run " + first + " --resume"), std::string::npos)
      << read_file(out);
  EXPECT_EQ(study_row(db, "first")["status"], "interrupted");
  // Its summary is what the run printed; `wait` returns at once, saying interrupted (exit 3).
  Result recorded = sh(hippo("plan.db") + "--format json summary first");
  EXPECT_EQ(json::parse(recorded.out), last_json(read_file(out))) << recorded.out;
  Result waited = sh(hippo("plan.db") + "--format json wait first");
  EXPECT_EQ(waited.status, 3) << waited.out;
  EXPECT_EQ(waited.out, recorded.out);

  // The same spec again, without --resume: refused, saying how to go on; nothing changes.
  Result again = sh(hippo("plan.db") + "run " + first + " --workers 2 2>&1");
  EXPECT_EQ(again.status, 2) << again.out;
  EXPECT_NE(again.out.find("hippo resume first"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--resume"), std::string::npos) << again.out;

  Result b = sh(hippo("plan.db") + "--format json run " + second + " --workers 2 2>&1");
  ASSERT_EQ(b.status, 0) << b.out;
  Result a = sh(hippo("plan.db") + "--format json run " + first + " --workers 2 --resume 2>&1");
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(metrics_by_trial(trials(db, "first")), calm_first);
  EXPECT_EQ(metrics_by_trial(trials(db, "second")), calm_second);
  // Resumed, it trained only what the interrupted run had not (the plan counts it all).
  const json summary = last_json(a.out);
  EXPECT_GE(summary["steps_executed"].get<int64_t>(),
            summary["steps_unique"].get<int64_t>() - summary["steps_reused"].get<int64_t>());
  // Once more: a study that is done has nothing to resume.
  Result done = sh(hippo("plan.db") + "run " + first + " --resume 2>&1");
  EXPECT_EQ(done.status, 2);
  EXPECT_NE(done.out.find("is done: there is nothing to resume"), std::string::npos) << done.out;
}

// A run SIGKILLed: the kernel ends its workers with it (they are its children), the next run on
// the plan finds the study interrupted, and `hippo resume` ends it with an undisturbed run's
// metrics; `hippo delete` then frees its name.
TEST_F(Lifecycle, AKilledRunLeavesNoWorkerAndItsStudyIsResumed) {
  const std::string file = longer("killed");
  const auto expected = calm(file, "killed");
  const std::string db = path("plan.db");
  const pid_t run =
      spawn({"/bin/sh", "-c", "exec " + hippo("plan.db") + "run " + file + " --workers 2"});
  wait_for_a_metric(db, "killed");
  ASSERT_GT(workers_of_run(run), 0);
  kill(run, SIGKILL);
  waitpid(run, nullptr, 0);
  EXPECT_EQ(workers_left_after(run, 10), 0) << "a worker outlived its run";
  Result r = sh(hippo("plan.db") + "--format json resume killed --workers 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(last_json(r.out)["status"], "done");
  EXPECT_EQ(metrics_by_trial(trials(db, "killed")), expected);
  // Deleted, it leaves the listings and its name is free; a running study cannot be deleted.
  Result d = sh(hippo("plan.db") + "delete killed 2>&1");
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_TRUE(study_row(db, "killed").is_null());
  Result rerun = sh(hippo("plan.db") + "--format json run " + file + " --workers 2 2>&1");
  ASSERT_EQ(rerun.status, 0) << rerun.out;
  EXPECT_EQ(metrics_by_trial(trials(db, "killed")), expected);
  Result unknown = sh(hippo("plan.db") + "delete nothing 2>&1");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.out.find("no study named nothing"), std::string::npos) << unknown.out;
}

// A worker whose checkpoint directory takes no write of a checkpoint's size (a file-size limit:
// as a full disk, EFBIG): it says so, the master sets it aside after its first failures, the
// other worker does the work, and `hippo workers` says why it gets none.
TEST_F(Lifecycle, AWorkerThatCannotWriteIsSetAside) {
  const std::string file = small_study("setaside");
  const auto expected = calm(file, "setaside");
  const std::string address = "ipc://" + path("master.sock"), db = path("plan.db");
  const pid_t master =
      spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck")});
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"), "--name", "a-bad"},
        [] {
          signal(SIGXFSZ, SIG_IGN);  // ignored dispositions survive exec
          rlimit limit{64 * 1024, 64 * 1024};
          setrlimit(RLIMIT_FSIZE, &limit);
        });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its name sorts first: work
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"), "--name", "b-fine"});
  Result r = sh(kHippo + " --master " + address + " --format json submit " + file + " --wait");
  ASSERT_EQ(r.status, 0) << r.out << log_of(master);
  EXPECT_EQ(metrics_by_trial(trials(db, "setaside")), expected);
  Result failures = sh("sqlite3 " + db +
                       " \"SELECT count(*) FROM executions WHERE worker = 'a-bad' AND outcome = "
                       "'failed'\"");
  EXPECT_GE(std::stoll(failures.out), 1);
  EXPECT_LE(std::stoll(failures.out), 3) << log_of(master);
  EXPECT_GE(events(db, "worker_fault") + events(db, "worker_set_aside"), 1) << log_of(master);
  const json workers =
      json::parse(sh(kHippo + " --master " + address + " --format json workers").out);
  bool said = false;
  for (const json& w : workers)
    if (w["name"] == "a-bad")
      said = w.value("unavailable", "").find("File too large") != std::string::npos;
  EXPECT_TRUE(said) << workers;
  // The table says it too, in place of "idle".
  const std::string table = sh(kHippo + " --master " + address + " workers").out;
  const size_t row = table.find("a-bad");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find("no work: "), std::string::npos) << table;
  EXPECT_NE(line.find("File too large"), std::string::npos) << table;
}

// Two workers on checkpoint directories of their own; the first trains alone until the second
// comes, then is drained: before it exits, it hands the states that only its disk holds to the
// master's directory, so the second worker fetches them from there and nothing is replayed.
TEST_F(Lifecycle, ADrainOnAWorkersOwnDiskReplaysNothing) {
  const std::string file = longer("drained");
  const auto expected = calm(file, "drained");
  const std::string address = "ipc://" + path("master.sock"), db = path("plan.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck-master")});
  const pid_t w0 = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", path("ck-w0"), "--name", "w0"});
  const std::string client = kHippo + " --master " + address + " ";
  ASSERT_EQ(sh(client + "submit " + file).status, 0);
  wait_for_a_metric(db, "drained");
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a state or two on w0's disk
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck-w1"), "--name", "w1"});
  ASSERT_EQ(sh(client + "drain w0").status, 0);
  EXPECT_EQ(exit_status_within(w0, 60), 0);
  EXPECT_EQ(wait_for_end(db, 120), "done");
  EXPECT_EQ(metrics_by_trial(trials(db, "drained")), expected);
  EXPECT_GE(events(db, "checkpoint_handed_over"), 1);
  EXPECT_EQ(events(db, "checkpoint_lost"), 0);
  Result replays =
      sh("sqlite3 " + db + " \"SELECT count(*) FROM executions WHERE kind = 'replay'\"");
  EXPECT_EQ(std::stoll(replays.out), 0);
}

// The master killed right after a commit, before it sent what that commit decided (a failpoint:
// HIPPO_FAILPOINT), then at other points of later starts, then started once more: the study
// ends with the metrics of an undisturbed run, and its summary counts every step.
TEST_F(Lifecycle, AMasterKilledBetweenACommitAndItsMessagesResumes) {
  const std::string file = longer("failpoint");
  const auto expected = calm(file, "failpoint");
  const std::string address = "ipc://" + path("master.sock"), db = path("plan.db");
  const std::vector<std::string> master = {
      kHippo,  "--db",          db,         "master",           "--bind",
      address, "--checkpoints", path("ck"), "--worker-timeout", "2"};
  auto status = [&] {
    const json row = study_row(db, "failpoint");
    return row.is_null() ? std::string() : row["status"].get<std::string>();
  };
  const pid_t first = spawn(master);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"), "--name", "w"});
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + file).status, 0);
  wait_for_a_metric(db, "failpoint");
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  int killed = 0;
  for (int commits : {3, 11, 29}) {
    const pid_t m = spawn(master, [commits] {
      setenv("HIPPO_FAILPOINT", ("master.after_commit:" + std::to_string(commits)).c_str(), 1);
    });
    int wait_status = 0;
    while (waitpid(m, &wait_status, WNOHANG) == 0 && status() == "running")
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (status() != "running") {  // it ended before the failpoint: nothing left to resume
      kill(m, SIGKILL);
      waitpid(m, nullptr, 0);
      break;
    }
    EXPECT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL);
    ++killed;
  }
  EXPECT_GE(killed, 1);
  spawn(master);
  EXPECT_EQ(wait_for_end(db, 180), "done");
  EXPECT_EQ(metrics_by_trial(trials(db, "failpoint")), expected);
  // Every step, over every master: at least the unique ones an undisturbed run executes once.
  const std::string query = " 'SELECT steps_executed FROM study_accounts'";
  Result executed = sh("sqlite3 " + db + query);
  Result once = sh("sqlite3 " + path("calm-failpoint.db") + query);
  ASSERT_FALSE(executed.out.empty() || once.out.empty()) << executed.out << once.out;
  EXPECT_GE(std::stoll(executed.out), std::stoll(once.out));
}

}  // namespace
}  // namespace hippo::e2e
