// End-to-end tests: the real `hippo` and `hippo-worker` binaries as processes, talking over
// ZeroMQ, writing a real SQLite file. Each test works in its own temporary directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "storage/plan.h"
#include "storage/time_split.h"
#include "tests/e2e/e2e_helper.h"

namespace {

using namespace hippo::e2e;
using hippo::ExecutionOutcome;
using hippo::ExecutionRow;
using hippo::SearchPlan;

class E2E : public E2ETest {
 protected:
  struct Study {
    std::string file, name;
  };
  void expect_restart_changes_nothing(const std::vector<Study>& studies);
  // Runs a spec with 2 workers on shared.db, then trial-based on trial.db; both summaries.
  std::pair<json, json> run_both_policies(const std::string& file) {
    Result shared = sh(hippo("shared.db") + "--format json run " + file + " --workers 2");
    EXPECT_EQ(shared.status, 0) << shared.out;
    Result trial_based =
        sh(hippo("trial.db") + "--format json run " + file + " --workers 2 --policy trial-based");
    EXPECT_EQ(trial_based.status, 0) << trial_based.out;
    if (shared.status != 0 || trial_based.status != 0) return {};
    return {last_json(shared.out), last_json(trial_based.out)};
  }
};

TEST_F(E2E, SharedAndTrialBasedRunsGiveIdenticalMetrics) {
  auto [s, t] = run_both_policies(spec("ci", json::object()));
  ASSERT_FALSE(s.is_null());

  // The CI example: lr step_decay with init in {0.1, 0.05} and every in {1, 2} epochs, 3 epochs
  // of 32 steps. Per init the two trials share epoch 0, then every=1 and every=2 diverge.
  EXPECT_EQ(s["trials"], 4);
  EXPECT_EQ(s["steps_trial_based"], 4 * 96);
  EXPECT_EQ(s["steps_unique"], 2 * (32 + 64 + 64));
  EXPECT_EQ(s["steps_executed"], s["steps_unique"]);
  EXPECT_EQ(s["critical_path_steps"], 96);
  EXPECT_EQ(t["steps_executed"], t["steps_trial_based"]);
  EXPECT_EQ(s["best"], t["best"]);

  Result a = sh(hippo("shared.db") + "--format json trials ci");
  Result b = sh(hippo("trial.db") + "--format json trials ci");
  ASSERT_EQ(a.status, 0);
  ASSERT_EQ(b.status, 0);
  auto ma = metrics_by_trial(json::parse(a.out));
  auto mb = metrics_by_trial(json::parse(b.out));
  ASSERT_EQ(ma.size(), 4u);
  EXPECT_EQ(ma, mb);
  for (const json& trial : json::parse(a.out)) {
    EXPECT_EQ(trial["status"], "done");
    EXPECT_EQ(trial["metrics"].size(), 3u * 3u);  // accuracy, loss, params after epochs 1, 2, 3
  }
}

// Idle cores lent (worker/README.md): a CNN grid whose shared first epoch one worker trains while
// the other waits, and whose third branch trains alone at the end. With --lend-cores its stages
// take the idle worker's core (and give it back when both have work): the same bits as without.
const json kLentChanges = {
    {"model", {{"type", "cnn"}, {"hidden", nullptr}, {"channels", {8, 16}}, {"fc", {32}}}},
    {"data", {{"train_samples", 1024}, {"eval_samples", 256}}},
    {"hyperparameters",
     {{"lr",
       {{"schedule", "warmup_linear"},
        {"every", nullptr},
        {"gamma", nullptr},
        {"init", 0.05},
        {"warmup", 1},
        {"after",
         {{"schedule", "cosine"},
          {"init", 0.05},
          {"final", 0.0},
          {"length", {{"grid", {1, 2, 3}}}}}}}}}}};

// The master log's lines of jobs sent with both threads of a 2-core host (in its order, or from a
// step on: the master's log says which).
int jobs_with_two_threads(const std::string& log) {
  int n = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    n += line.find("job ") != std::string::npos && line.find(" 2 threads") != std::string::npos;
  return n;
}

TEST_F(E2E, LentCoresTrainTheSameBits) {
  const std::string file = spec("lent", kLentChanges);
  Result lent = sh(hippo("lent.db") + "--log-level debug --format json run " + file +
                   " --workers 2 --lend-cores 2>&1");
  ASSERT_EQ(lent.status, 0) << lent.out;
  Result own =
      sh(hippo("own.db") + "--log-level debug --format json run " + file + " --workers 2 2>&1");
  ASSERT_EQ(own.status, 0) << own.out;
  // Some job ran with both threads (the second worker may say hello after the first has its
  // job); without lending, none did.
  EXPECT_GE(jobs_with_two_threads(lent.out), 1) << lent.out;
  EXPECT_EQ(jobs_with_two_threads(own.out), 0) << own.out;
  EXPECT_EQ(last_json(lent.out)["steps_executed"], last_json(own.out)["steps_executed"]);
  const json a = json::parse(sh(hippo("lent.db") + "--format json trials lent").out);
  const json b = json::parse(sh(hippo("own.db") + "--format json trials lent").out);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(metrics_by_trial(a), metrics_by_trial(b));
}

// `hippo master --lend-cores` lends as `run --lend-cores` does: the same study submitted to a
// cluster master with two workers on this host has a job sent with both threads (without the
// flag it has none: the test above).
TEST_F(E2E, AClusterMasterLendsCoresWithTheFlag) {
  const std::string file = spec("lent", kLentChanges), address = "ipc://" + path("master.sock");
  const pid_t master = spawn({kHippo, "--log-level", "debug", "--db", path("cluster.db"), "master",
                              "--bind", address, "--lend-cores"});
  for (const char* name : {"a", "b"})
    spawn({kHippo, "worker", "--master", address, "--checkpoints", path("checkpoints"), "--name",
           name});
  Result run = sh(kHippo + " --master " + address + " --format json submit " + file + " --wait");
  ASSERT_EQ(run.status, 0) << run.out;
  EXPECT_EQ(json::parse(run.out)["status"], "done") << run.out;
  EXPECT_GE(jobs_with_two_threads(log_of(master)), 1) << log_of(master);
}

// Two architectures in the space (`model.hidden`) under the CI example's grid: each is a root
// key of its own, trials share stages within their architecture only, every trial reports its
// model's trainable parameters, and each trial equals, bit for bit, the same trial trained alone.
TEST_F(E2E, ArchitecturesAreRootsOfTheirOwn) {
  const std::string file =
      spec("arch", {{"model", {{"hidden", {{"grid", {{16}, {32, 16}}}}}}},
                    {"data", {{"train_samples", 512}, {"eval_samples", 128}}}});
  auto [s, t] = run_both_policies(file);
  ASSERT_FALSE(s.is_null());
  // 8 steps an epoch, 3 epochs. Per architecture and init the two trials share epoch 0.
  EXPECT_EQ(s["trials"], 8);
  EXPECT_EQ(s["steps_trial_based"], 8 * 24);
  EXPECT_EQ(s["steps_unique"], 2 * 2 * (8 + 16 + 16));
  EXPECT_EQ(s["steps_executed"], s["steps_unique"]);
  EXPECT_EQ(t["steps_executed"], t["steps_trial_based"]);
  EXPECT_EQ(s["best"], t["best"]);

  json shared = json::parse(sh(hippo("shared.db") + "--format json trials arch").out);
  json alone = json::parse(sh(hippo("trial.db") + "--format json trials arch").out);
  ASSERT_EQ(shared.size(), 8u);
  EXPECT_EQ(metrics_by_trial(shared), metrics_by_trial(alone));
  // Weights and biases of 784 -> 16 -> 10 and of 784 -> 32 -> 16 -> 10.
  const std::map<json, double> kParams = {
      {json{16}, 784 * 16 + 16 + 16 * 10 + 10},
      {json{32, 16}, 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10}};
  for (const json& trial : shared) {
    ASSERT_TRUE(kParams.count(trial["params"]["model.hidden"])) << trial.dump();
    EXPECT_EQ(trial["status"], "done");
    int reported = 0;
    for (const json& m : trial["metrics"])
      if (m["name"] == "params") {
        EXPECT_EQ(m["value"], kParams.at(trial["params"]["model.hidden"])) << trial.dump();
        ++reported;
      }
    EXPECT_EQ(reported, 3) << "at each evaluation";
  }
  // Grid numbering: the first leaf varies fastest, the model's leaves come last.
  EXPECT_EQ(shared[0]["params"]["model.hidden"], json{16});
  EXPECT_EQ(shared[7]["params"]["model.hidden"], (json{32, 16}));

  // One root key per architecture (the tree's two roots), the same in both runs less the
  // trial-based suffix, and the model's own.
  std::map<std::string, std::set<std::string>> shared_roots, alone_roots;  // key -> hidden
  auto trial_rows = [&](const std::string& db) {
    SearchPlan plan = SearchPlan::open_read_only(path(db));
    return plan.trials(plan.studies().at(0).id);
  };
  for (const hippo::TrialRow& row : trial_rows("shared.db"))
    shared_roots[row.root_key].insert(row.params["model.hidden"].dump());
  for (const hippo::TrialRow& row : trial_rows("trial.db"))
    alone_roots[row.root_key.substr(0, row.root_key.find("/trial-"))].insert(
        row.params["model.hidden"].dump());
  EXPECT_EQ(shared_roots.size(), 2u);
  EXPECT_EQ(shared_roots, alone_roots);
  for (const auto& [key, hidden] : shared_roots) EXPECT_EQ(hidden.size(), 1u) << key;
  // Within an architecture the two trials of an init share its first epoch; across, nothing.
  Result tree = sh(hippo("shared.db") + "tree arch");
  ASSERT_EQ(tree.status, 0);
  size_t roots = 0;
  for (size_t at = 0; (at = tree.out.find("\n  [0, 8) lr=0.1 ", at)) != std::string::npos; ++at)
    ++roots;
  EXPECT_EQ(roots, 2u) << tree.out;
  Result csv = sh(hippo("shared.db") + "export arch");
  EXPECT_NE(csv.out.find(",\"[32,16]\","), std::string::npos) << csv.out;
}

// A warmup-stable-decay cooldown sweep (starts x lengths x shapes) on the built-in gpt: every
// trial ends where its own cooldown ends (length.end_of), is evaluated there, shares the stable
// phase and equals, bit for bit, the same trial trained alone.
TEST_F(E2E, WsdCooldownSweepSharedEqualsTrialBased) {
  json s = json::parse(std::ifstream(kExamples + "/gpt-fortunes-wsd.json"));
  s["name"] = "wsd";
  s["model"].update({{"layers", 1}, {"dim", 32}, {"heads", 2}, {"context", 32}});
  s["hyperparameters"]["lr"].update({{"warmup", 5},
                                     {"decay_start", {{"grid", {20, 40}}}},
                                     {"decay", {{"grid", {5, 15}}}},
                                     {"shape", {{"grid", {"linear", "cosine", "1-sqrt"}}}}});
  s["eval"]["every"] = {{"steps", 10}};
  const std::string file = path("wsd.json");
  std::ofstream(file) << s.dump();
  auto [sum, alone] = run_both_policies(file);
  ASSERT_FALSE(sum.is_null());
  // Lengths S + D: 25, 35, 45, 55 for each of 3 shapes.
  EXPECT_EQ(sum["trials"], 12);
  EXPECT_EQ(sum["steps_trial_based"], 3 * (25 + 35 + 45 + 55));
  EXPECT_EQ(sum["steps_executed"], sum["steps_unique"]);
  EXPECT_LT(sum["steps_unique"].get<int64_t>(), sum["steps_trial_based"].get<int64_t>() / 2);
  EXPECT_EQ(alone["steps_executed"], sum["steps_trial_based"]);
  json trials = json::parse(sh(hippo("shared.db") + "--format json trials wsd").out);
  ASSERT_EQ(trials.size(), 12u);
  for (const json& t : trials) {
    const int64_t end =
        t["params"]["lr.decay_start"].get<int64_t>() + t["params"]["lr.decay"].get<int64_t>();
    EXPECT_EQ(t["length"], end);
    EXPECT_EQ(t["metrics"].back()["step"], end) << "evaluated at its own end";
  }
  EXPECT_EQ(metrics_by_trial(trials),
            metrics_by_trial(json::parse(sh(hippo("trial.db") + "--format json trials wsd").out)));
}

TEST_F(E2E, QueriesReadTheSearchPlan) {
  std::string file = spec("q", json::object());
  ASSERT_EQ(sh(hippo("q.db") + "run " + file + " --workers 1 >/dev/null").status, 0);
  Result studies = sh(hippo("q.db") + "--format json studies");
  ASSERT_EQ(studies.status, 0);
  json list = json::parse(studies.out);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["name"], "q");
  EXPECT_EQ(list[0]["status"], "done");

  Result best = sh(hippo("q.db") + "--format json best q");
  ASSERT_EQ(best.status, 0);
  json b = json::parse(best.out);
  EXPECT_EQ(b["metric"], "accuracy");
  EXPECT_GT(b["value"].get<double>(), 0.3);  // far above chance (0.1) after 3 small epochs

  Result tree = sh(hippo("q.db") + "tree q");
  ASSERT_EQ(tree.status, 0);
  EXPECT_NE(tree.out.find("[0, 32)"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("trained"), std::string::npos);

  Result csv = sh(hippo("q.db") + "export q");
  ASSERT_EQ(csv.status, 0);
  EXPECT_EQ(csv.out.rfind("trial,status,length,end_step,lr.init,lr.every,step,metric,value\n", 0),
            0u)
      << csv.out;

  EXPECT_EQ(sh(hippo("q.db") + "trials nosuchstudy 2>/dev/null").status, 2);
  EXPECT_EQ(sh(hippo("missing.db") + "studies 2>/dev/null").status, 2);
  EXPECT_FALSE(fs::exists(path("missing.db")));
}

TEST_F(E2E, BadInputExitsTwoAndChangesNothing) {
  std::string file = spec("bad", {{"hyperparameters", {{"lr", {{"grid", json::array()}}}}}});
  Result r = sh(hippo("bad.db") + "run " + file + " --workers 1 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("hyperparameters.lr"), std::string::npos) << r.out;
  EXPECT_EQ(sh(hippo("bad.db") + "run " + file + " --policy sometimes 2>/dev/null").status, 2);
  EXPECT_EQ(sh(hippo("bad.db") + "run " + path("nofile.json") + " 2>/dev/null").status, 2);
  // --gpus: a worker per GPU that is there, named once, and not with --workers.
  const std::string good_spec = spec("gpus", json::object());
  for (const auto& [gpus, message] : std::vector<std::pair<std::string, std::string>>{
           {"9999", "--gpus: cuda:9999 requested, this machine has"},
           {"x", "--gpus: expected all or device numbers like 0,1, got \"x\""},
           {"0,", "--gpus: expected all or device numbers"},
           {"0 --workers 2", "--gpus and --workers: give one"}}) {
    Result g = sh(hippo("bad.db") + "run " + good_spec + " --gpus " + gpus + " 2>&1");
    EXPECT_EQ(g.status, 2) << gpus;
    EXPECT_NE(g.out.find(message), std::string::npos) << gpus << ": " << g.out;
  }
  EXPECT_EQ(sh(hippo("bad.db") + "--format json trials gpus 2>/dev/null").status, 2);  // no study

  // The same study name twice in one search plan is refused, and the first study is untouched.
  std::string good = spec("twice", json::object());
  ASSERT_EQ(sh(hippo("bad.db") + "run " + good + " --workers 1 >/dev/null").status, 0);
  std::string before = sh(hippo("bad.db") + "--format json trials twice").out;
  EXPECT_EQ(sh(hippo("bad.db") + "run " + good + " --workers 1 2>/dev/null").status, 2);
  EXPECT_EQ(sh(hippo("bad.db") + "--format json trials twice").out, before);
}

// A master and two workers as separate processes; two studies over overlapping grids share the
// tree: the second trains only the stages the first did not.
TEST_F(E2E, SecondStudyTrainsOnlyItsNewStages) {
  std::string address = "ipc://" + path("master.sock");
  std::string db = path("cluster.db");
  std::string checkpoints = path("checkpoints");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints});
  for (const char* name : {"w0", "w1"})
    spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", name});

  // Study A: init in {0.1, 0.05}, every in {1, 2}. Study B: init in {0.1, 0.02}, same every.
  // B shares every stage of init 0.1 with A.
  std::string a = spec("a", json::object());
  std::string b = spec("b", {{"hyperparameters", {{"lr", {{"init", {{"grid", {0.1, 0.02}}}}}}}}});
  std::string client = kHippo + " --master " + address + " --format json submit ";
  Result ra = sh(client + a + " --wait");
  ASSERT_EQ(ra.status, 0) << ra.out;
  Result rb = sh(client + b + " --wait");
  ASSERT_EQ(rb.status, 0) << rb.out;
  json sa = last_json(ra.out), sb = last_json(rb.out);
  EXPECT_EQ(sa["steps_executed"], sa["steps_unique"]);
  EXPECT_EQ(sb["steps_unique"], sa["steps_unique"]);
  EXPECT_EQ(sb["steps_executed"].get<int64_t>(), sb["steps_unique"].get<int64_t>() / 2);

  // The trials of B with init 0.1 have the metrics of A's, bit for bit.
  json ta = json::parse(sh(kHippo + " --db " + db + " --format json trials a").out);
  json tb = json::parse(sh(kHippo + " --db " + db + " --format json trials b").out);
  int shared = 0;
  for (const json& x : ta)
    for (const json& y : tb)
      if (x["params"] == y["params"]) {
        EXPECT_EQ(x["metrics"].dump(), y["metrics"].dump());
        ++shared;
      }
  EXPECT_EQ(shared, 2);
}

// A study submitted while another one trains: its trial diverges inside the stage that a worker
// is running, the worker is told to snapshot at the split step, and no step is trained twice.
TEST_F(E2E, SplitOfARunningStageTrainsNothingTwice) {
  std::string address = "ipc://" + path("master.sock");
  std::string db = path("split.db"), checkpoints = path("ck");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints});
  pid_t worker =
      spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "w"});
  // One long stage: lr 0.05 for 4000 steps. The second study's trial follows it for 2000 steps
  // (seconds of training, time enough for the second submission to arrive).
  json base = {{"model", {{"hidden", {512, 256}}}},
               {"data", {{"train_samples", 4096}, {"eval_samples", 512}}},
               {"length", {{"steps", 4000}, {"epochs", nullptr}}},
               {"eval", {{"every", {{"steps", 1000}, {"epochs", nullptr}}}}}};
  json first = base, second = base;
  first["hyperparameters"] = {{"lr", 0.05}};
  second["hyperparameters"] = {
      {"lr",
       {{"schedule", "piecewise"},
        {"points", {{0, 0.05}, {2000, 0.02}}},
        // null removes the CI example's step_decay fields from the merged spec
        {"init", nullptr},
        {"every", nullptr},
        {"gamma", nullptr},
        {"unit", nullptr}}}};
  std::string client = kHippo + " --master " + address + " --format json submit ";
  ASSERT_EQ(sh(client + spec("first", first)).status, 0);
  // The second study comes once the first one's stage is under way: its metric after 1000 steps
  // is in the plan (and the split step 2000 is, most likely, still ahead of the worker).
  for (int i = 0; i < 1500; ++i) {
    Result t = sh(kHippo + " --db " + db + " --format json trials first 2>/dev/null");
    if (t.status == 0 && t.out.find("\"step\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Result r2 = sh(client + spec("second", second) + " --wait");
  ASSERT_EQ(r2.status, 0) << r2.out;
  json s1;
  for (int i = 0; i < 600; ++i) {
    json status = protocol_status(address, "first");
    if (!status.is_null()) {
      s1 = status;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  json s2 = last_json(r2.out);
  ASSERT_FALSE(s1.is_null());
  EXPECT_EQ(s1["steps_executed"], 4000);
  EXPECT_EQ(s2["steps_unique"], 4000);
  // Only its own branch: the first 2000 were shared. On a machine so loaded that the worker had
  // passed step 2000 before the order came, it says so, and the state is rebuilt by a replay.
  std::ifstream log(path("process-" + std::to_string(worker) + ".log"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  bool late = text.find("snapshot_at refused") != std::string::npos;
  EXPECT_EQ(s2["steps_executed"], late ? 4000 : 2000) << text;
}

// The master killed (SIGKILL) in the middle of its studies and started again on the same search
// plan: the worker reconnects by itself, every study goes on from the plan (its searcher from its
// saved state), and each ends with the trials, decisions and metrics of an undisturbed run of it
// alone; no trial is left running.
void E2E::expect_restart_changes_nothing(const std::vector<Study>& studies) {
  const std::string in_repo = "cd " + kExamples + "/.. && ";
  for (const Study& s : studies) {
    Result calm = sh(in_repo + hippo("calm-" + s.name + ".db") + "--format json run " + s.file +
                     " --workers 1");
    ASSERT_EQ(calm.status, 0) << calm.out;
  }

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("restart.db"), checkpoints = path("ck");
  std::vector<std::string> master = {
      kHippo,  "--db",          db,          "master",           "--bind",
      address, "--checkpoints", checkpoints, "--worker-timeout", "2"};
  pid_t first = spawn(master);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "w"});
  for (const Study& s : studies)
    ASSERT_EQ(
        sh(in_repo + kHippo + " --master " + address + " submit " + s.file + " >/dev/null").status,
        0);
  // Kill the master once some metrics of the first study are acknowledged (in the plan), then
  // start it again.
  wait_for_a_metric(db, studies[0].name);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  // The new master resolves the searchers' relative command paths from the same directory.
  pid_t second = fork();
  if (second == 0) {
    if (chdir((kExamples + "/..").c_str()) != 0) _exit(126);
    std::string log = path("master2.log");
    freopen(log.c_str(), "w", stderr);
    std::vector<char*> argv;
    for (const std::string& a : master) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  children_.push_back(second);
  auto all_ended = [](const json& list) {
    for (const json& s : list)
      if (s["status"] == "running") return false;
    return true;
  };
  for (int i = 0; i < 900; ++i) {
    json list = json::parse(sh(kHippo + " --db " + db + " --format json studies").out);
    if (list.size() == studies.size() && all_ended(list)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const Study& s : studies) {
    SCOPED_TRACE(s.name);
    json a =
        json::parse(sh(hippo("calm-" + s.name + ".db") + "--format json trials " + s.name).out);
    json b = json::parse(sh(kHippo + " --db " + db + " --format json trials " + s.name).out);
    ASSERT_GE(a.size(), 2u);
    EXPECT_EQ(a, b);  // same trials, params, statuses (none left running), lengths and metrics
  }
  // The second master found the studies running in the plan and resumed each of them.
  Result resumed = sh("sqlite3 " + db + " \"SELECT count(*) FROM events WHERE kind = 'resumed'\"");
  EXPECT_EQ(resumed.out, std::to_string(studies.size()) + "\n");
}

TEST_F(E2E, MasterRestartContinuesAGridStudy) {
  json changes = {{"model", {{"hidden", {256, 128}}}},
                  {"data", {{"train_samples", 4096}, {"eval_samples", 512}}}};
  expect_restart_changes_nothing({{spec("restart", changes), "restart"}});
}

TEST_F(E2E, MasterRestartContinuesAnAshaStudy) {
  expect_restart_changes_nothing({{kExamples + "/fmnist-mlp-asha.json", "fmnist-mlp-asha"}});
}

TEST_F(E2E, MasterRestartContinuesAPbtStudy) {
  expect_restart_changes_nothing({{kExamples + "/fmnist-mlp-pbt.json", "fmnist-mlp-pbt"}});
}

// Two studies at once, a grid and an adaptive one, through one restart.
TEST_F(E2E, MasterRestartContinuesTwoStudies) {
  json changes = {{"model", {{"hidden", {256, 128}}}},
                  {"data", {{"train_samples", 4096}, {"eval_samples", 512}}}};
  expect_restart_changes_nothing({{spec("grid-two", changes), "grid-two"},
                                  {kExamples + "/fmnist-mlp-asha.json", "fmnist-mlp-asha"}});
}

// Garbage on the master's socket is refused, and the master goes on serving.
TEST_F(E2E, MasterSurvivesHostileMessages) {
  std::string address = "ipc://" + path("master.sock");
  std::string db = path("hostile.db");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck")});
  {
    zmq::context_t context;
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    use_local_key(dealer);  // admitted (this user's key), so that the garbage reaches the master
    dealer.connect(address);
    const std::vector<std::vector<std::string>> messages = {
        {"", "not json"},
        {"", "{\"v\": 99, \"type\": \"hello\"}"},
        {"", "{\"v\": 1}"},
        {"", "{\"v\": 1, \"type\": \"hello\", \"name\": 5}"},
        {"", "{\"v\": 1, \"type\": \"done\", \"job\": 12345}"},
        {"", std::string(10000, '[')},
        {"no delimiter"},
        {"", "{\"v\": 1, \"type\": \"metric\", \"job\": -1, \"step\": 1e308}"},
    };
    for (const auto& frames : messages) {
      for (size_t i = 0; i < frames.size(); ++i)
        dealer.send(zmq::buffer(frames[i]),
                    i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::string file = spec("after", json::object());
  Result r = sh(kHippo + " --master " + address + " --format json submit " + file);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(last_json(r.out)["study"], "after");
}

// Every example study runs to the end, on a prefix of the data, with sharing exact.
TEST_F(E2E, EveryExampleRuns) {
  int ran = 0;
  for (const auto& entry : fs::directory_iterator(kExamples)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    json s = json::parse(in);
    if (s["model"]["type"] == "external") continue;  // run by their own tests
    s["data"]["train_samples"] = 1024;
    s["data"]["eval_samples"] = 256;
    std::string file = path(entry.path().filename().string());
    std::ofstream(file) << s.dump();
    std::string db = entry.path().stem().string() + ".db";
    // From the repository root, as the README runs them (external searchers name their script
    // relative to it).
    Result r = sh("cd " + kExamples + "/.. && " + hippo(db) + "--format json run " + file +
                  " --workers 2 --allow-exec searcher");
    ASSERT_EQ(r.status, 0) << entry.path() << "\n" << r.out;
    json summary = last_json(r.out);
    EXPECT_EQ(summary["status"], "done") << entry.path();
    // Each needed step once; a searcher that stops trials in the middle of a stage also wastes
    // what was under way when it stopped them (counted, never hidden).
    json trials = json::parse(
        sh(hippo(db) + "--format json trials " + summary["study"].get<std::string>()).out);
    bool stopped = std::any_of(trials.begin(), trials.end(),
                               [](const json& t) { return t["status"] == "stopped"; });
    if (stopped)
      EXPECT_GE(summary["steps_executed"], summary["steps_unique"]) << entry.path();
    else
      EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]) << entry.path();
    // A study of several objectives has a Pareto front in place of a best trial.
    bool several = s["searcher"].contains("objectives") && s["searcher"]["objectives"].size() > 1;
    EXPECT_TRUE(summary.contains(several ? "front" : "best")) << entry.path();
    // Once no study runs, the checkpoint directory holds only the states kept for later studies.
    EXPECT_EQ(files_not_retained(path(db), path(db + ".checkpoints")), std::vector<std::string>{})
        << entry.path();
    ++ran;
  }
  EXPECT_GE(ran, 3);
}

// A worker killed (SIGKILL) in the middle of a study: the master notices the silence, the stage
// goes back to the queue from the newest snapshot, and every metric equals an undisturbed run.
TEST_F(E2E, LostWorkerStageIsRequeued) {
  json changes = {{"model", {{"hidden", {256, 128}}}},
                  {"data", {{"train_samples", 4096}, {"eval_samples", 512}}}};
  std::string file = spec("lost", changes);
  Result calm = sh(hippo("calm.db") + "--format json run " + file + " --workers 1");
  ASSERT_EQ(calm.status, 0) << calm.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("lost.db"), checkpoints = path("ck");
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints,
         "--worker-timeout", "1", "--snapshot-every", "16"});
  pid_t victim = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "victim"});
  Result submitted = sh(kHippo + " --master " + address + " submit " + file);
  ASSERT_EQ(submitted.status, 0) << submitted.out;
  // Kill the only worker once it has trained something, then give the study a new worker.
  for (int i = 0; i < 400; ++i) {
    if (!checkpoint_names(checkpoints).empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "rescue"});
  for (int i = 0; i < 600; ++i) {
    json studies = json::parse(sh(kHippo + " --db " + db + " --format json studies").out);
    if (studies.size() == 1 && studies[0]["status"] != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  json a = json::parse(sh(hippo("calm.db") + "--format json trials lost").out);
  json b = json::parse(sh(kHippo + " --db " + db + " --format json trials lost").out);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(metrics_by_trial(a), metrics_by_trial(b));
  // The plan's executions (the dashboard's timeline) say what happened: the victim's job lost,
  // the rescue's done. With a one-second timeout a loaded machine can also lose a job of a live
  // worker (it hellos again and is given work), so the count is at least one, not exactly one.
  SearchPlan plan = SearchPlan::open_read_only(db);
  int lost = 0, rescued = 0;
  for (const ExecutionRow& e : plan.executions(std::nullopt)) {
    lost += e.worker == "victim" && e.outcome == ExecutionOutcome::kLost;
    rescued += e.worker == "rescue" && e.outcome == ExecutionOutcome::kDone;
  }
  EXPECT_GE(lost, 1);
  EXPECT_GT(rescued, 0);
}

// `hippo workers` shows who trains what; `hippo cancel` ends one of two running studies: its
// trials stop, the work under way for it alone is abandoned at once (the workers are idle within
// seconds, not at the end of their stages), its checkpoints go, and the other study runs on to
// the same metrics as alone.
TEST_F(E2E, CancelEndsOneStudyAndFreesItsWorkers) {
  // Two trials of one stage each, 50 epochs of all of Fashion-MNIST: a minute of training.
  json slow = {{"model", {{"hidden", {256, 128}}}},
               {"data", {{"train_samples", 60000}}},
               {"hyperparameters", constant_lr({0.1, 0.05})},
               {"length", {{"epochs", 50}}}};
  std::string long_study = spec("long", slow), short_study = spec("short", json::object());
  Result alone = sh(hippo("alone.db") + "--format json run " + short_study + " --workers 1");
  ASSERT_EQ(alone.status, 0) << alone.out;

  std::string address = "ipc://" + path("master.sock");
  std::string db = path("cluster.db"), checkpoints = path("ck");
  // --keep-checkpoints 0: every state no running study needs goes (nothing kept for later).
  spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints,
         "--keep-checkpoints", "0"});
  for (const char* name : {"w0", "w1"})
    spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", name});
  std::string client = kHippo + " --master " + address + " --format json ";
  ASSERT_EQ(sh(client + "submit " + long_study).status, 0);

  // Both workers on the long study's first stages.
  auto workers = [&] { return json::parse(sh(client + "workers").out); };
  json list;
  for (int i = 0; i < 500; ++i) {
    list = workers();
    if (list.size() == 2 && list[0].contains("job") && list[1].contains("job")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(list.size(), 2u) << list.dump();
  for (const json& w : list) {
    ASSERT_TRUE(w.contains("job")) << list.dump();
    EXPECT_EQ(w["job"]["studies"], json::array({"long"}));
    EXPECT_EQ(w["device"], "cpu");
  }

  Result cancelled = sh(client + "cancel long");
  ASSERT_EQ(cancelled.status, 0) << cancelled.out;
  EXPECT_EQ(last_json(cancelled.out)["status"], "cancelled");
  // Abandoned at the next step: both idle within 3 s, long before a stage could end.
  bool idle = false;
  for (int i = 0; i < 150 && !idle; ++i) {
    list = workers();
    idle = std::none_of(list.begin(), list.end(), [](const json& w) { return w.contains("job"); });
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(idle) << list.dump();
  // Their jobs are in the plan's executions as abandoned, for the cancelled study.
  for (int i = 0; i < 500; ++i) {
    int abandoned = 0;
    SearchPlan plan = SearchPlan::open_read_only(db);
    int64_t long_id = plan.study_by_name("long")->id;
    for (const ExecutionRow& e : plan.executions(long_id))
      abandoned += e.outcome == ExecutionOutcome::kAbandoned;
    if (abandoned == 2) break;
    ASSERT_LT(i, 499) << "the abandoned jobs are not in the plan's executions";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // The other study runs to the end on the freed workers, with the metrics it has alone.
  Result other = sh(client + "submit " + short_study + " --wait");
  ASSERT_EQ(other.status, 0) << other.out;
  EXPECT_EQ(last_json(other.out)["status"], "done");
  json a = json::parse(sh(hippo("alone.db") + "--format json trials short").out);
  json b = json::parse(sh(kHippo + " --db " + db + " --format json trials short").out);
  EXPECT_EQ(metrics_by_trial(a), metrics_by_trial(b));

  // The cancelled study: no trial left pending or running, nothing of it on disk.
  json trials = json::parse(sh(kHippo + " --db " + db + " --format json trials long").out);
  ASSERT_FALSE(trials.empty());
  for (const json& t : trials) EXPECT_EQ(t["status"], "stopped") << t.dump();
  json studies = json::parse(sh(kHippo + " --db " + db + " --format json studies").out);
  for (const json& st : studies)
    EXPECT_EQ(st["status"], st["name"] == "long" ? "cancelled" : "done") << st.dump();
  EXPECT_TRUE(checkpoint_names(checkpoints).empty());

  // Cancelling again, or a study that does not exist, is bad input; so is no master.
  Result again = sh(client + "cancel long 2>&1");
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.out.find("has already ended: cancelled"), std::string::npos) << again.out;
  Result unknown = sh(client + "cancel nosuch 2>&1");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.out.find("no study named nosuch"), std::string::npos) << unknown.out;
  Result no_master = sh("env -u HIPPO_MASTER " + kHippo + " workers 2>&1");
  EXPECT_EQ(no_master.status, 2);
  EXPECT_NE(no_master.out.find("no master"), std::string::npos) << no_master.out;
}

// A run that ends with a job under way (Ctrl-C here; a study can also end while a job for a
// stopped trial still runs) records that job as abandoned: the plan's executions, which the
// dashboard sums, add up to the steps executed that the run's summary printed (its heartbeats
// told the master how far it got).
TEST_F(E2E, ARunEndedMidJobRecordsTheJobItAbandoned) {
  // All of Fashion-MNIST per epoch: seconds per epoch, so that a job is under way at the end.
  // One trial, one stage: the job that the first metric came from is the one interrupted (with
  // the CI example's schedule, a job ending at a split could be followed by one that had not yet
  // sent a heartbeat when a loaded machine got to the interrupt).
  std::string file = spec("long", {{"model", {{"hidden", {256, 128}}}},
                                   {"data", {{"train_samples", 60000}}},
                                   {"hyperparameters", constant_lr({0.05})},
                                   {"length", {{"epochs", 50}}}});
  const std::string db = path("long.db"), out = path("summary.json");
  pid_t run =
      spawn({"/bin/sh", "-c",
             "exec " + hippo("long.db") + "--format json run " + file + " --workers 1 > " + out});
  wait_for_a_metric(db, "long");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a heartbeat or two
  kill(run, SIGINT);
  ASSERT_EQ(exit_status_within(run, 30), 1) << read_file(out);
  json summary = last_json(read_file(out));
  EXPECT_EQ(summary["status"], "interrupted");  // resumable (Lifecycle tests resume such runs)
  EXPECT_GT(summary["steps_executed"].get<int64_t>(), 0);

  int64_t executed = 0, abandoned = 0;
  for (const ExecutionRow& e : SearchPlan::open_read_only(db).executions(std::nullopt)) {
    executed += e.reached - e.from;
    if (e.outcome != ExecutionOutcome::kAbandoned) continue;
    ++abandoned;
    EXPECT_GT(e.reached, e.from) << "the heartbeats said how far the job got";
  }
  EXPECT_EQ(abandoned, 1);
  EXPECT_EQ(executed, summary["steps_executed"].get<int64_t>());
}

// The example of docs/spec.md, whole: 18 trials on all of Fashion-MNIST with two workers.
TEST_F(E2E, InterfaceExampleSharesExactly) {
  auto [s, t] = run_both_policies(kExamples + "/fmnist-mlp-lr-decay.json");
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["trials"], 18);
  EXPECT_EQ(s["steps_unique"], 21060);
  EXPECT_EQ(s["steps_executed"], 21060);
  EXPECT_EQ(s["critical_path_steps"], 1872);
  EXPECT_EQ(t["steps_executed"], 33696);
  EXPECT_EQ(s["best"], t["best"]);
  EXPECT_GT(s["best"]["value"].get<double>(), 0.85);
  auto ma = metrics_by_trial(json::parse(
      sh(hippo("shared.db") + "--format json trials " + s["study"].get<std::string>()).out));
  auto mb = metrics_by_trial(json::parse(
      sh(hippo("trial.db") + "--format json trials " + s["study"].get<std::string>()).out));
  EXPECT_EQ(ma.size(), 18u);
  EXPECT_EQ(ma, mb);
  std::printf("shared: %s\ntrial-based: %s\n", s.dump().c_str(), t.dump().c_str());
}

// Where each worker's time went (the summary's "time"): its parts add to the study's wall time,
// and the parts the workers measured (training, evaluation, states) cover nearly all of its busy
// time, on a real run. `hippo report` shows the same table.
TEST_F(E2E, TheSummarySaysWhereEachWorkersTimeWent) {
  // The CI example on more data, so that training is most of the work (reading the data is
  // `setup`).
  const std::string file = spec("split", {{"data", {{"train_samples", 16384}}}});
  Result r = sh(hippo("m.db") + "--format json run " + file + " --workers 2");
  ASSERT_EQ(r.status, 0) << r.out;
  const json s = last_json(r.out);
  const double wall = s["wall_s"];
  const json& split = s["time"];
  EXPECT_EQ(split["window_s"], s["wall_s"]);
  ASSERT_EQ(split["workers"].size(), 2u);
  int64_t jobs = 0, evaluations = 0;
  for (const json& w : split["workers"]) {
    double sum = 0;
    for (const char* part : hippo::kTimeParts) sum += w[std::string(part) + "_s"].get<double>();
    EXPECT_NEAR(sum, wall, 0.03 * wall) << w;
    EXPECT_GT(w["train_s"].get<double>(), 0) << w;
    EXPECT_GT(w["eval_s"].get<double>(), 0) << w;
    EXPECT_GT(w["evaluations"].get<int64_t>(), 0) << w;  // what eval_s is the time of
    evaluations += w["evaluations"].get<int64_t>();
    EXPECT_GT(w["setup_s"].get<double>(), 0) << w;  // its engine: the data read once
    // What no measured part names: a few percent of the finished jobs' time at most (a job the
    // master abandoned, when a searcher's decision made it useless, is `unfinished`).
    const double busy = sum - w["idle_s"].get<double>() - w["unfinished_s"].get<double>();
    EXPECT_LT(w["other_s"].get<double>() + w["dispatch_s"].get<double>(), 0.05 * busy) << w;
    jobs += w["jobs"].get<int64_t>();
  }
  SearchPlan plan = SearchPlan::open_read_only(path("m.db"));
  EXPECT_EQ(jobs, static_cast<int64_t>(plan.executions(std::nullopt).size()));
  EXPECT_EQ(split["all"]["evaluations"], evaluations);
  // Each state evaluated once: at most one evaluation per (trial, step) that has metrics.
  std::set<std::pair<hippo::TrialId, int64_t>> evaluated;
  for (const hippo::StudyRow& study : plan.studies())
    for (const hippo::MetricRow& m : plan.study_metrics(study.id))
      evaluated.insert({m.trial, m.step});
  EXPECT_LE(evaluations, static_cast<int64_t>(evaluated.size()));
  Result text = sh(hippo("m.db") + "report split -o " + path("r.html"));
  EXPECT_EQ(text.status, 0) << text.out;
  EXPECT_NE(read_file(path("r.html")).find("<h2>Where each worker's time went</h2>"),
            std::string::npos);
}

// An idle worker that runs trainers starts the study's long-lived trainer before work reaches it
// (Prepare): a trainer whose start takes 1 s costs the worker that trains the shared first stage
// that second, and the worker that waited for the branch nothing.
TEST_F(E2E, AnIdleWorkerStartsItsTrainerAheadOfItsFirstStage) {
  const std::string trainer = path("slow_start.py");
  std::ofstream(trainer)
      << "import pickle, time\n"
         "time.sleep(1)  # a PyTorch import\n"
         "import hippo\n"
         "def train(stage):\n"
         "    model = {'w': 1.0}\n"
         "    stage.restore(lambda f: model.update(pickle.load(f)))\n"
         "    for step in stage.steps(evaluate=lambda: {'accuracy': model['w']},\n"
         "                            save=lambda f: pickle.dump(model, f)):\n"
         "        model['w'] *= 1 - stage.value('lr', step)\n"
         "hippo.serve(train)\n";
  // One root stage (lr 0.1 for the first epoch), then two branches.
  const std::string file = spec("slow-start", {{"model",
                                                {{"type", "external"},
                                                 {"hidden", nullptr},
                                                 {"command", {"/usr/bin/python3", trainer}},
                                                 {"long_lived", true}}},
                                               {"hyperparameters", {{"lr", {{"init", 0.1}}}}}});
  Result r = sh("PYTHONPATH=" + kExamples + "/../python " + hippo("m.db") + "--format json run " +
                file + " --workers 2 --allow-exec trainer");
  ASSERT_EQ(r.status, 0) << r.out;
  const json workers = last_json(r.out)["time"]["workers"];
  ASSERT_EQ(workers.size(), 2u) << workers;
  std::vector<double> starts;
  for (const json& w : workers) starts.push_back(w["start_s"]);
  std::sort(starts.begin(), starts.end());
  EXPECT_LT(starts[0], 0.3) << workers;  // started ahead: ready when its first stage came
  EXPECT_GT(starts[1], 0.8) << workers;  // the first stage waited for its trainer's start
}

}  // namespace
