// Provenance, end to end (issue 43, part 6): a master with --auth and two workers of different
// keys run a study; the plan records which key made each state and each metric, `hippo
// checkpoints --produced-by KEY` lists exactly one key's work, and `--forget` distrusts it: its
// states and metrics go, the study is interrupted, and `hippo resume` measures the forgotten
// evaluations again (other workers, the same bits) and ends the study done.
#include <sys/wait.h>

#include <csignal>
#include <set>
#include <sstream>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Provenance : public E2ETest {
 protected:
  // `hippo keygen` NAME, its public half also into authorized/ROLE when given.
  void keygen(const std::string& name, const std::string& role = "") {
    ASSERT_EQ(sh(kHippo + " keygen " + path(name) + " >/dev/null").status, 0);
    if (role.empty()) return;
    fs::create_directories(path("authorized/" + role));
    fs::copy_file(path(name + ".pub"), path("authorized/" + role + "/" + name + ".pub"));
  }
  std::string key(const std::string& name) { return read_file(path(name + ".pub")).substr(0, 40); }
  std::string log_path(pid_t pid) const { return path("process-" + std::to_string(pid) + ".log"); }
  // One value of a query of the plan, by the sqlite3 command (from a file: a Z85 key holds
  // characters that a shell would read).
  std::string sql(const std::string& query) {
    std::ofstream(path("query.sql")) << query << ";\n";
    std::string out = sh("sqlite3 " + path("plan.db") + " < " + path("query.sql")).out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  static std::set<int64_t> ids(const json& rows) {
    std::set<int64_t> out;
    for (const json& r : rows) out.insert(r["id"].get<int64_t>());
    return out;
  }
  std::set<int64_t> ids_where(const std::string& query) {
    std::set<int64_t> out;
    std::istringstream in(sql(query));
    for (std::string line; std::getline(in, line);) out.insert(std::stoll(line));
    return out;
  }
};

TEST_F(Provenance, AKeysWorkIsListedForgottenAndMeasuredAgain) {
  keygen("master");
  keygen("alice", "workers");
  keygen("bob", "workers");
  keygen("client", "clients");
  const std::string address = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string db = path("plan.db");
  pid_t master =
      spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", path("ck"), "--auth",
             "--key", path("master.key"), "--authorized", path("authorized")});
  ASSERT_TRUE(appears(log_path(master), "listening on")) << read_file(log_path(master));
  std::vector<pid_t> workers;
  for (const std::string& name : std::vector<std::string>{"alice", "bob"})
    workers.push_back(spawn({kHippo, "worker", "--master", address, "--checkpoints",
                             path("ck-" + name), "--name", name, "--master-key", path("master.pub"),
                             "--key", path(name + ".key"), "--threads", "1"}));
  const std::string client = kHippo + " --master " + address + " --master-key " +
                             path("master.pub") + " --key " + path("client.key") + " ";
  for (int i = 0; i < 200; ++i) {  // both workers are there before any work is
    Result r = sh(client + "--format json workers 2>/dev/null");
    if (r.status == 0 && json::parse(r.out).size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Four trials, each its own stage from step 0 (constant learning rates): two idle workers
  // share them, and no state of one key is the parent of another's.
  const std::string spec_file =
      spec("both", {{"hyperparameters", constant_lr({0.02, 0.05, 0.1, 0.2})}});
  Result run = sh(client + "--format json submit " + spec_file + " --wait");
  ASSERT_EQ(run.status, 0) << run.out << read_file(log_path(master));
  ASSERT_EQ(last_json(run.out)["status"], "done");
  const std::map<int64_t, std::string> before = metrics_by_trial(trials(db, "both"));

  // Every state and metric names the key that made it; both keys made some.
  const std::string alice = key("alice"), bob = key("bob");
  EXPECT_EQ(sql("SELECT count(*) FROM metrics WHERE producer NOT IN ('" + alice + "', '" + bob +
                "') OR lineage != producer"),
            "0");
  const std::string alice_metrics =
      sql("SELECT count(*) FROM metrics WHERE producer = '" + alice + "'");
  ASSERT_NE(alice_metrics, "0");
  ASSERT_NE(sql("SELECT count(*) FROM metrics WHERE producer = '" + bob + "'"), "0");
  EXPECT_EQ(sql("SELECT count(*) FROM checkpoints WHERE producer NOT IN ('" + alice + "', '" + bob +
                "')"),
            "0");

  // The listing: exactly alice's states and metrics, by her .pub file or her key.
  const std::string checkpoints = hippo("plan.db") + "--format json checkpoints --checkpoints " +
                                  path("ck") + " --produced-by ";
  Result listed = sh(checkpoints + path("alice.pub"));
  ASSERT_EQ(listed.status, 0) << listed.out;
  json list = last_json(listed.out);
  EXPECT_FALSE(list["states"].empty()) << "no state of alice's kept: the listing proves little";
  EXPECT_EQ(ids(list["states"]),
            ids_where("SELECT id FROM checkpoints WHERE producer = '" + alice + "'"));
  EXPECT_EQ(std::to_string(list["metrics"].size()), alice_metrics);
  for (const json& m : list["metrics"]) EXPECT_EQ(m["how"], "made");
  EXPECT_EQ(last_json(sh(checkpoints + "'" + alice + "'").out), list);  // Z85 has no quote

  // Bad keys: a clear error, exit status 2, nothing changed.
  for (const std::string& bad :
       std::vector<std::string>{"'not a key'", path("no-such.pub"), path("plan.db"), "''"}) {
    Result r = sh(checkpoints + bad + " --forget 2>&1");
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--produced-by"), std::string::npos) << r.out;
  }
  Result no_study = sh(hippo("plan.db") + "checkpoints --forget 2>&1");
  EXPECT_EQ(no_study.status, 2) << no_study.out;
  EXPECT_NE(no_study.out.find("--produced-by KEY"), std::string::npos) << no_study.out;
  // While the master runs on the plan, forgetting is refused (the plan's lock).
  EXPECT_NE(sh(checkpoints + path("alice.pub") + " --forget 2>&1").status, 0);
  EXPECT_EQ(sql("SELECT count(*) FROM metrics WHERE producer = '" + alice + "'"), alice_metrics);

  for (pid_t pid : workers) kill(pid, SIGTERM);
  kill(master, SIGTERM);
  for (pid_t pid : workers) EXPECT_GE(exit_status_within(pid, 20), 0);
  EXPECT_GE(exit_status_within(master, 20), 0);

  // Forgotten: alice's states and metrics leave the plan, her trials wait to be measured again.
  Result forgot = sh(checkpoints + path("alice.pub") + " --forget");
  ASSERT_EQ(forgot.status, 0) << forgot.out;
  json done = last_json(forgot.out);
  EXPECT_EQ(done["forgotten"], true);
  EXPECT_EQ(done["studies_to_resume"], json::array({"both"}));
  const std::string reopened = sql("SELECT count(*) FROM trials WHERE remeasure = 1");
  EXPECT_EQ(done["trials_to_measure_again"].dump(), reopened);
  EXPECT_NE(reopened, "0");
  EXPECT_EQ(sql("SELECT count(*) FROM metrics WHERE lineage LIKE '%" + alice + "%'"), "0");
  EXPECT_EQ(sql("SELECT count(*) FROM checkpoints WHERE lineage LIKE '%" + alice + "%'"), "0");
  EXPECT_EQ(sql("SELECT status FROM studies"), "interrupted");
  EXPECT_EQ(events(db, "key_distrusted"), 1);
  EXPECT_TRUE(last_json(sh(checkpoints + path("alice.pub")).out)["metrics"].empty());

  // Resumed (by workers of `hippo resume`'s own key): the forgotten evaluations are measured
  // again, bit for bit what they were, by nobody of alice's; the study ends done.
  Result resumed = sh(hippo("plan.db") + "--format json resume both --workers 1 2>&1");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_EQ(last_json(resumed.out)["status"], "done");
  EXPECT_EQ(metrics_by_trial(trials(db, "both")), before);
  EXPECT_EQ(sql("SELECT count(*) FROM metrics WHERE producer = '" + alice + "'"), "0");
  EXPECT_EQ(sql("SELECT count(*) FROM trials WHERE remeasure = 1 OR status != 'done'"), "0");
  EXPECT_EQ(sql("SELECT status FROM studies"), "done");
}

}  // namespace
}  // namespace hippo::e2e
