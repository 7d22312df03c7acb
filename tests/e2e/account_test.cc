// The account is whole under every fault (issue 42), with the real hippo and hippo-worker
// processes: the steps trainers trained (a trainer that writes each one down,
// step_log_trainer.py) equal the plan's `steps_executed` within a step per job cut off, under a
// Ctrl-C of `hippo run` and under a master killed for 2 and 10 s in a cluster whose workers have
// checkpoint directories of their own; work finished while no master ran is adopted, not trained
// again; `wall_s` counts the outage; clean runs record no abandoned job; a study run again after
// `delete` of an identical one trains nothing.
#include <signal.h>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Account : public E2ETest {
 protected:
  // The CI example's grid trained by the step-logging trainer: 4 trials over `epochs` epochs of
  // 32 steps, shared at first (2 roots, 4 branches at step 32).
  std::string logged_study(const std::string& name, int epochs, double step_seconds) {
    setenv("HIPPO_TEST_STEP_LOG", path("steps.log").c_str(), 1);
    setenv("HIPPO_TEST_STEP_SECONDS", std::to_string(step_seconds).c_str(), 1);
    return spec(
        name,
        {{"model",
          {{"type", "external"}, {"command", {"/usr/bin/python3", kTrainer}}, {"hidden", nullptr}}},
         {"fixed", {{"optimizer", nullptr}, {"momentum", nullptr}}},
         {"length", {{"epochs", epochs}}}});
  }
  // Steps the trainers wrote down.
  int64_t steps_logged() {
    std::ifstream in(path("steps.log"));
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  int64_t steps_executed(const std::string& db) {
    Result r = sh("sqlite3 " + db + " 'SELECT SUM(steps_executed) FROM study_accounts'");
    return r.out.empty() ? -1 : std::stoll(r.out);
  }
  int64_t executions_not_done(const std::string& db) {
    Result r = sh("sqlite3 " + db + " \"SELECT COUNT(*) FROM executions WHERE outcome != 'done'\"");
    return r.out.empty() ? -1 : std::stoll(r.out);
  }
  void wait_for_steps(int64_t n) {
    for (int i = 0; i < 600 && steps_logged() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The metrics of an undisturbed run of the spec, and the steps it executed (its unique ones).
  std::map<int64_t, std::string> calm(const std::string& file, const std::string& name,
                                      int64_t* unique = nullptr) {
    Result r = sh(hippo("calm.db") + "--format json run " + file +
                  " --workers 2 --allow-exec trainer 2>/dev/null");
    EXPECT_EQ(r.status, 0) << r.out;
    if (unique) *unique = last_json(r.out).value("steps_unique", int64_t{-1});
    return metrics_by_trial(trials(path("calm.db"), name));
  }
  // A master killed (SIGKILL) while its workers train, restarted after `outage_s`.
  void outage(double outage_s) {
    const std::string file = logged_study("outage", 6, 0.02);
    int64_t unique = 0;
    const auto expected = calm(file, "outage", &unique);
    fs::remove(path("steps.log"));
    const std::string address = "ipc://" + path("master.sock"), db = path("plan.db");
    const std::vector<std::string> master = {
        kHippo,         "--db",          db,         "master",           "--bind",
        address,        "--checkpoints", path("ck"), "--worker-timeout", "2",
        "--allow-exec", "trainer"};
    const pid_t first = spawn(master);
    for (const char* name : {"a", "b"})
      spawn({kHippo, "worker", "--master", address, "--checkpoints",
             path(std::string("ck-") + name), "--name", name, "--allow-exec", "trainer"});
    const auto submitted = Clock::now();
    ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + file).status, 0);
    wait_for_steps(100);  // the branches are under way
    kill(first, SIGKILL);
    waitpid(first, nullptr, 0);
    std::this_thread::sleep_for(std::chrono::duration<double>(outage_s));
    spawn(master);
    ASSERT_EQ(wait_for_end(db, 120), "done");
    const double elapsed = std::chrono::duration<double>(Clock::now() - submitted).count();
    EXPECT_EQ(metrics_by_trial(trials(db, "outage")), expected);
    // Every step trained is counted, once; what was finished meanwhile was adopted.
    const int64_t logged = steps_logged(), executed = steps_executed(db);
    EXPECT_EQ(executed, logged);
    EXPECT_EQ(executed, unique) << "work trained again";
    // The wall time is from submit to end, the outage included (the plan's record of it).
    Result times = sh("sqlite3 -separator ' ' " + db +
                      " 'SELECT s.ended_at - s.created_at - a.paused_s, a.run_s FROM studies s "
                      "JOIN study_accounts a ON a.study_id = s.id'");
    double wall = 0, active = 0;
    std::istringstream(times.out) >> wall >> active;
    EXPECT_GE(wall, outage_s) << times.out;
    EXPECT_LE(wall, elapsed + 1) << times.out;
    EXPECT_LT(active, wall - 0.5 * outage_s) << times.out;
    std::cout << "outage " << outage_s << " s: " << logged << " steps logged, " << executed
              << " executed, " << unique << " unique; wall " << wall << " s, active " << active
              << " s\n";
  }
  const std::string kTrainer = std::string(HIPPO_E2E_DIR) + "/step_log_trainer.py";
};

// Ctrl-C at the terminal reaches the run's whole process group: the run alone takes it (its
// workers have groups of their own), tells its workers to stop, and records each job in flight at
// the step its trainer reached. Resumed, the study ends with the metrics of an undisturbed run,
// and every step the trainers trained, over both runs, is counted.
TEST_F(Account, ACtrlCCountsWhatTheTrainersTrained) {
  const std::string file = logged_study("ctrlc", 4, 0.02);
  const auto expected = calm(file, "ctrlc");
  fs::remove(path("steps.log"));
  const std::string db = path("plan.db");
  const pid_t run =
      spawn({"/bin/sh", "-c",
             "exec " + hippo("plan.db") + "run " + file + " --workers 2 --allow-exec trainer"},
            [] { setpgid(0, 0); });
  wait_for_steps(120);
  kill(-run, SIGINT);
  int status = 0;
  waitpid(run, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a trainer that would go on
  const int64_t logged = steps_logged(), executed = steps_executed(db);
  EXPECT_LE(executed, logged);
  EXPECT_LE(logged - executed, 2) << "steps trained and not counted (2 jobs were in flight)";
  Result r =
      sh(hippo("plan.db") + "--format json resume ctrlc --workers 2 --allow-exec trainer 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(metrics_by_trial(trials(db, "ctrlc")), expected);
  EXPECT_LE(steps_logged() - steps_executed(db), 2);
  EXPECT_GE(steps_logged() - steps_executed(db), 0);
  const json summary = last_json(r.out);
  EXPECT_GT(summary["steps_earlier_runs"].get<int64_t>(), 0) << summary.dump();
  EXPECT_EQ(summary["steps_reused"].get<int64_t>(), 0) << summary.dump();
}

TEST_F(Account, AMasterDownFor2SecondsThrowsNoWorkAway) {
  outage(2);
}
TEST_F(Account, AMasterDownFor10SecondsThrowsNoWorkAway) {
  outage(10);
}

// A clean run ends every job it started as done: nothing abandoned, no unfinished time, and each
// unique step executed once (20 runs of a 3-trial grid; 5 under the sanitizers).
TEST_F(Account, CleanRunsRecordNoAbandonedJob) {
  const std::string file = spec("clean", {{"model", {{"hidden", {16}}}},
                                          {"hyperparameters", constant_lr({0.1, 0.05, 0.02})}});
  const int runs = kAddressSanitized ? 5 : 20;
  for (int i = 0; i < runs; ++i) {
    const std::string db = "clean-" + std::to_string(i) + ".db";
    Result r = sh(hippo(db) + "--format json run " + file + " --workers 2 2>&1");
    ASSERT_EQ(r.status, 0) << r.out;
    const json s = last_json(r.out);
    EXPECT_EQ(executions_not_done(path(db)), 0) << "run " << i << ": " << s.dump();
    EXPECT_EQ(s["time"]["all"]["unfinished_s"].get<double>(), 0) << "run " << i;
    EXPECT_EQ(s["steps_executed"], s["steps_unique"]) << "run " << i << ": " << s.dump();
  }
}

// Run, delete, run the same spec again: the tree and the evaluations of the deleted study serve
// the new one, which trains nothing and says so.
TEST_F(Account, ARerunAfterDeleteTrainsNothing) {
  const std::string file = small_study("again");
  Result first = sh(hippo("plan.db") + "--format json run " + file + " --workers 2 2>&1");
  ASSERT_EQ(first.status, 0) << first.out;
  const auto metrics = metrics_by_trial(trials(path("plan.db"), "again"));
  ASSERT_EQ(sh(hippo("plan.db") + "delete again").status, 0);
  Result second = sh(hippo("plan.db") + "--format json run " + file + " --workers 2 2>&1");
  ASSERT_EQ(second.status, 0) << second.out;
  const json s = last_json(second.out);
  EXPECT_EQ(s["steps_executed"], 0) << s.dump();
  EXPECT_EQ(s["steps_reused"], s["steps_unique"]) << s.dump();
  EXPECT_EQ(metrics_by_trial(trials(path("plan.db"), "again")), metrics);
}

}  // namespace
}  // namespace hippo::e2e
