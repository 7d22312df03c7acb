// History as a prior, with the real hippo and hippo-worker processes: a study warm-started from
// an earlier one of the same plan, its run killed mid-study and the earlier study forgotten and
// deleted, resumes to exactly the trials of an undisturbed run (its prior evaluations are in its
// stored spec); `hippo preview` says what it starts from; bad warm starts are refused and change
// nothing; `hippo enqueue` on a running study makes the configuration its next trial, through a
// master's restart, and refuses bad input, an ended study and an interrupted one; it reaches a
// `hippo run` of the same user, and params the study has already make no new trial.
#include <signal.h>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class WarmStart : public E2ETest {
 protected:
  // The CI example over lr in [0.01, 0.3] (one leaf, constant in each trial).
  std::string study(const std::string& name, const json& searcher,
                    const json& changes = json::object()) {
    json patch = {{"hyperparameters", constant_lr_from({{"loguniform", {0.01, 0.3}}})},
                  {"searcher", searcher}};
    patch.merge_patch(changes);
    return spec(name, patch);
  }
  std::string earlier() {
    return study("earlier",
                 {{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 5}});
  }
  std::string warm() {
    return study("warm",
                 {{"name", "tpe"},
                  {"metric", "accuracy"},
                  {"mode", "max"},
                  {"max_trials", 4},
                  {"n_startup", 2},
                  {"parallel", 1}},
                 {{"warm_start", {{"studies", {"earlier"}}}}});
  }
  // Each trial's params and metrics, by number, as text (equal text: equal bits).
  std::map<int64_t, std::string> results(const std::string& db, const std::string& name) {
    std::map<int64_t, std::string> out;
    for (const json& t : trials(path(db), name))
      out[t["trial"]] = t["params"].dump() + " " + t["metrics"].dump();
    return out;
  }
};

TEST_F(WarmStart, ReplaysExactlyAfterAKillAndAForgetOfTheEarlierStudy) {
  const std::string first = earlier(), second = warm();
  // Undisturbed.
  ASSERT_EQ(sh(hippo("calm.db") + "run " + first + " --workers 1 2>&1").status, 0);
  Result calm = sh(hippo("calm.db") + "run " + second + " --workers 1 2>&1");
  ASSERT_EQ(calm.status, 0) << calm.out;
  const auto expected = results("calm.db", "warm");
  ASSERT_EQ(expected.size(), 4u);

  // Killed mid-study; the earlier study's checkpoints forgotten and the study deleted; resumed.
  ASSERT_EQ(sh(hippo("plan.db") + "run " + first + " --workers 1 2>&1").status, 0);
  Result preview = sh(hippo("plan.db") + "preview " + second + " --workers 1 2>&1");
  ASSERT_EQ(preview.status, 0) << preview.out;
  EXPECT_NE(preview.out.find("warm start: 15 evaluations of 5 trials from earlier (5 trials)"),
            std::string::npos)
      << preview.out;
  const std::string db = path("plan.db");
  const pid_t run =
      spawn({"/bin/sh", "-c", "exec " + hippo("plan.db") + "run " + second + " --workers 1"});
  wait_for_a_metric(db, "warm");
  kill(run, SIGKILL);
  waitpid(run, nullptr, 0);
  ASSERT_NE(trials(db, "warm").size(), 4u) << "the run ended before it was killed";
  Result forget = sh(hippo("plan.db") + "checkpoints --forget earlier 2>&1");
  ASSERT_EQ(forget.status, 0) << forget.out;
  Result deleted = sh(hippo("plan.db") + "delete earlier 2>&1");
  ASSERT_EQ(deleted.status, 0) << deleted.out;
  Result resumed =
      sh(hippo("plan.db") + "--format json run " + second + " --resume --workers 1 2>&1");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_EQ(last_json(resumed.out)["status"], "done");
  EXPECT_EQ(results("plan.db", "warm"), expected);
}

TEST_F(WarmStart, BadWarmStartsAreRefusedAndChangeNothing) {
  ASSERT_EQ(sh(hippo("plan.db") + "run " + earlier() + " --workers 1 2>&1").status, 0);
  auto refused = [&](const std::string& file, const std::string& error) {
    for (const std::string& command : {"run " + file + " --workers 1", "preview " + file}) {
      Result r = sh(hippo("plan.db") + command + " 2>&1");
      EXPECT_EQ(r.status, 2) << command << ": " << r.out;
      EXPECT_NE(r.out.find(error), std::string::npos) << command << ": " << r.out;
    }
    EXPECT_EQ(json::parse(sh(hippo("plan.db") + "--format json studies").out).size(), 1u);
  };
  const json tpe = {{"name", "tpe"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 4}};
  refused(study("a", tpe, {{"warm_start", {{"studies", {"nosuch"}}}}}),
          "warm_start.studies[0]: no study \"nosuch\" in this plan");
  refused(study("b", {{"name", "tpe"}, {"metric", "loss"}, {"mode", "min"}, {"max_trials", 4}},
                {{"warm_start", {{"studies", {"earlier"}}}}}),
          "warm_start.studies[0]: study earlier searched accuracy (max), this study loss (min)");
  refused(study("c", tpe, {{"warm_start", {{"studies", {"c"}}}}}),
          "warm_start.studies[0]: \"c\" is this study itself");
  refused(
      study("d", {{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 4}},
            {{"warm_start", {{"studies", {"earlier"}}}}}),
      "warm_start: searcher random learns nothing from evaluations");
  refused(study("e", tpe,
                {{"warm_start", {{"studies", {"earlier"}}}},
                 {"hyperparameters", {{"weight_decay", {{"uniform", {0.0, 0.001}}}}}}}),
          "warm_start.studies[0]: study earlier has no leaf weight_decay");
}

TEST_F(WarmStart, EnqueueOnARunningStudyIsItsNextTrialThroughARestart) {
  const std::string address = "ipc://" + path("master.sock"), db = path("plan.db");
  const std::vector<std::string> master = {kHippo,  "--db",          db,        "master", "--bind",
                                           address, "--checkpoints", path("ck")};
  const std::string client = kHippo + " --master " + address + " --format json ";
  // No worker yet: the study waits at its first trial.
  pid_t m = spawn(master);
  const std::string file = study("enq", {{"name", "tpe"},
                                         {"metric", "accuracy"},
                                         {"mode", "max"},
                                         {"max_trials", 3},
                                         {"n_startup", 3},
                                         {"parallel", 1}});
  Result submitted = sh(client + "submit " + file + " 2>&1");
  ASSERT_EQ(submitted.status, 0) << submitted.out << log_of(m);
  const std::string params = path("params.json");
  std::ofstream(params) << R"({"lr": 0.0625})";
  Result enqueued = sh(client + "enqueue enq " + params + " 2>&1");
  ASSERT_EQ(enqueued.status, 0) << enqueued.out;
  EXPECT_EQ(last_json(enqueued.out)["name"], "enq");
  // Bad input: exit 2, the reason, and nothing enqueued.
  auto refused = [&](const std::string& args, const std::string& error) {
    Result r = sh(client + "enqueue " + args + " 2>&1");
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(error), std::string::npos) << args << ": " << r.out;
  };
  refused("enq '{\"lr\": 5}'", "params.lr: value 5 is not in its range");
  refused("enq '{\"momentum\": 0.5}'", "params.lr: missing parameter");
  refused("enq '{\"lr\": '", "params: ");
  refused("enq nosuch.json", "params: nosuch.json is neither a JSON object nor a readable file");
  refused("nosuch '{\"lr\": 0.1}'", "no study named nosuch");
  ASSERT_EQ(sh(client + "submit " + earlier() + " 2>&1").status, 0);
  refused("earlier '{\"lr\": 0.1}'",
          "study earlier: searcher random: it takes no configuration while it runs");
  ASSERT_EQ(sh(client + "cancel earlier 2>&1").status, 0);
  // The master killed and started again, then a worker: the configuration is trial 2.
  kill(m, SIGKILL);
  waitpid(m, nullptr, 0);
  m = spawn(master);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"), "--name", "w"});
  Result waited = sh(kHippo + " --db " + db + " wait enq --timeout 120 2>&1");
  ASSERT_EQ(waited.status, 0) << waited.out << log_of(m);
  json made = trials(db, "enq");
  ASSERT_EQ(made.size(), 3u) << made.dump();
  EXPECT_EQ(made[1]["params"], json({{"lr", 0.0625}})) << made.dump();
  EXPECT_NE(made[2]["params"], made[1]["params"]);
  refused("enq '{\"lr\": 0.1}'", "study enq has already ended: done");
  // A study this master did not run (it ended before the restart) says how it ended.
  refused("earlier '{\"lr\": 0.1}'", "study earlier has already ended: cancelled");

  // An interrupted study (its run stopped by Ctrl-C) takes none until it is resumed: a master
  // holds the searchers of the studies it runs only.
  const std::string paused = study("paused", {{"name", "tpe"},
                                              {"metric", "accuracy"},
                                              {"mode", "max"},
                                              {"max_trials", 4},
                                              {"parallel", 1}});
  const pid_t run = spawn({"/bin/sh", "-c", "exec " + hippo("paused.db") + "run " + paused});
  wait_for_a_metric(path("paused.db"), "paused");
  kill(run, SIGINT);
  ASSERT_EQ(exit_status_within(run, 30), 1) << log_of(run);
  const std::string other = "ipc://" + path("other.sock");
  spawn(
      {kHippo, "--db", path("paused.db"), "master", "--bind", other, "--checkpoints", path("ck2")});
  Result r = sh(kHippo + " --master " + other + " enqueue paused '{\"lr\": 0.1}' 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(
      r.out.find("study paused is interrupted: resume it (hippo resume paused), then enqueue"),
      std::string::npos)
      << r.out;
}

// The processes whose parent is `parent` (from /proc: a `hippo run`'s workers).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// `hippo enqueue` without --master reaches this user's `hippo run` of the plan of --db (the run's
// record in $HIPPO_HOME/runs, master/run_record.h): the configuration becomes a trial of the run;
// params a trial has, or that wait for a slot, are not enqueued again (exit 0, saying which);
// another user, a key the run does not know, a request other than enqueue, no plan, no such study
// and an ended study are refused (exit 2). The run's one worker is held (SIGSTOP) while the client
// speaks, so that the study is still at its first trial.
TEST_F(WarmStart, EnqueueReachesAHippoRunOfTheSameUser) {
  const std::string db = path("run.db"), enqueue = kHippo + " --db " + db + " enqueue live ";
  auto says = [](const Result& r, int status, const std::string& text) {
    EXPECT_EQ(r.status, status) << r.out;
    EXPECT_NE(r.out.find(text), std::string::npos) << "expected \"" << text << "\" in: " << r.out;
  };
  says(sh(enqueue + "'{\"lr\": 0.1}' 2>&1"), 2, "no master to ask: give --master ADDR");
  const std::string file = study("live", {{"name", "tpe"},
                                          {"metric", "accuracy"},
                                          {"mode", "max"},
                                          {"max_trials", 3},
                                          {"n_startup", 3},
                                          {"parallel", 1}});
  const pid_t run = spawn({kHippo, "--db", db, "run", file, "--workers", "1"});
  std::vector<pid_t> workers;
  for (int i = 0; i < 2000 && workers.empty(); ++i) {
    workers = children_of(run);
    if (workers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(workers.size(), 1u) << log_of(run);
  kill(workers[0], SIGSTOP);
  const std::string given = R"('{"lr": 0.0625}')";
  says(sh(enqueue + given + " 2>&1"), 0, "enqueued in study live: its next trial");
  says(sh(enqueue + R"('{"lr": 6.25e-2}' 2>&1)"), 0,
       "study live has these params enqueued already, waiting for a free slot");
  says(sh(kHippo + " --db " + db + " enqueue nosuch " + given + " 2>&1"), 2,
       "no study named nosuch");
  const json first = trials(db, "live").at(0);
  says(sh(enqueue + "'" + first["params"].dump() + "' 2>&1"), 0,
       "study live has these params already: trial 1 (" + first["status"].get<std::string>() +
           "); nothing enqueued");
  // Another OS user (another $HIPPO_HOME) finds no run of its own; a key that learned the run's
  // record is refused at the handshake.
  const std::string other = path("other");
  says(sh("HIPPO_HOME=" + other + " " + enqueue + given + " 2>&1"), 2,
       "study live is running, but no `hippo run` of this user");
  fs::create_directories(other + "/runs");
  fs::permissions(other, fs::perms::owner_all);
  fs::permissions(other + "/runs", fs::perms::owner_all);
  std::string record;
  for (const fs::directory_entry& e : fs::directory_iterator(path("home/runs"))) record = e.path();
  ASSERT_FALSE(record.empty());
  fs::copy_file(record, other + "/runs/" + fs::path(record).filename().string());
  says(sh("HIPPO_HOME=" + other + " " + enqueue + given + " 2>&1"), 2,
       "refused this user's local key");
  // The run's master answers enqueue alone, even to its own user.
  std::ofstream(path("run.pub"))
      << json::parse(std::ifstream(record))["master_key"].get<std::string>() << "\n";
  const std::string address = json::parse(std::ifstream(record))["address"];
  says(sh(kHippo + " --master " + address + " --master-key " + path("run.pub") + " --key " +
          path("home/local.key") + " submit " + earlier() + " 2>&1"),
       2, "this master is a `hippo run`'s: it answers a client's enqueue only");
  kill(workers[0], SIGCONT);
  ASSERT_EQ(exit_status_within(run, 120), 0) << log_of(run);
  const json made = trials(db, "live");
  ASSERT_EQ(made.size(), 3u) << made.dump();
  // Once: trial 2, between the searcher's own first and next proposals.
  EXPECT_EQ(made[0]["params"], first["params"]);
  EXPECT_EQ(made[1]["params"], json({{"lr", 0.0625}})) << made.dump();
  EXPECT_NE(made[2]["params"], made[1]["params"]);
  EXPECT_NE(made[2]["params"], made[0]["params"]);
  EXPECT_TRUE(fs::is_empty(path("home/runs")));  // the run removed its record
  says(sh(enqueue + given + " 2>&1"), 2, "study live has already ended: done");
}

}  // namespace
}  // namespace hippo::e2e
