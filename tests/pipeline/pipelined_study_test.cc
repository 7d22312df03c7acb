// Pipelined studies end to end: the real hippo and hippo-worker processes. A gpt study trained
// through a 2-stage pipeline has the metrics of the same study trained unpipelined, bit for bit
// (also where its trials branch, and are evaluated and forked inside jobs), and the master gives
// a pipelined stage only to a worker with enough devices.
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class PipelinedStudy : public E2ETest {
 protected:
  // A small gpt study (2 trials of 20 steps) with the given "pipeline".
  std::string gpt_spec(const std::string& name, const json& pipeline) {
    json s = {{"name", name},
              {"model",
               {{"type", "gpt"},
                {"layers", 2},
                {"heads", 2},
                {"dim", 32},
                {"context", 16},
                {"vocab", 96}}},
              {"data", {{"name", "fortunes"}, {"train_samples", 2000}, {"eval_samples", 16}}},
              {"seed", 3},
              {"pipeline", pipeline},
              {"fixed", {{"batch_size", 8}, {"optimizer", "adamw"}}},
              {"hyperparameters", {{"lr", {{"grid", {0.003, 0.001}}}}}},
              {"searcher", {{"name", "grid"}, {"metric", "loss"}, {"mode", "min"}}},
              {"length", {{"steps", 20}}},
              {"eval", {{"every", {{"steps", 10}}}}}};
    std::string file = path(name + ".json");
    std::ofstream(file) << s.dump(2);
    return file;
  }
};

TEST_F(PipelinedStudy, HasTheMetricsOfTheUnpipelinedStudyBitForBit) {
  std::string pipelined = gpt_spec(
      "piped", {{"stages", 2}, {"microbatches", 2}, {"schedule", "interleaved"}, {"chunks", 2}});
  std::string plain = gpt_spec("piped", {{"stages", 1}, {"microbatches", 2}});
  Result a = sh("timeout 300 " + hippo("a.db") + "--format json run " + pipelined + " --workers 1");
  ASSERT_EQ(a.status, 0) << a.out;
  Result b = sh("timeout 300 " + hippo("b.db") + "--format json run " + plain + " --workers 1");
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_EQ(last_json(a.out)["steps_executed"], 40);
  json ta = json::parse(sh(hippo("a.db") + "--format json trials piped").out);
  json tb = json::parse(sh(hippo("b.db") + "--format json trials piped").out);
  ASSERT_EQ(ta.size(), 2u);
  EXPECT_EQ(metrics_by_trial(ta), metrics_by_trial(tb));
  EXPECT_EQ(ta[0]["metrics"].size(), 6u);  // loss, accuracy and params at steps 10 and 20
}

// Trials that branch (a learning rate that drops at step 10 or 20): the stages hold the state
// between the steps of a job, and what the job runner reads inside its jobs, evaluations every 5
// steps and the snapshots where trials branch (forked by the other worker), is the state the
// engine assembles at that step: every metric equals the same study's on one stage, bit for bit.
TEST_F(PipelinedStudy, ReadsInsideJobsAndForksHaveTheUnpipelinedMetrics) {
  auto spec = [&](const std::string& name, int stages) {
    std::string file = gpt_spec(name, {{"stages", stages}, {"microbatches", 2}});
    json s = json::parse(std::ifstream(file));
    s["hyperparameters"]["lr"] = {{"schedule", "multistep"},
                                  {"unit", "step"},
                                  {"init", {{"grid", {0.003, 0.001}}}},
                                  {"milestones", json::array({{{"grid", {10, 20}}}})},
                                  {"gamma", 0.3}};
    s["length"]["steps"] = 30;
    s["eval"]["every"]["steps"] = 5;
    std::ofstream(file) << s.dump(2);
    return file;
  };
  std::map<std::string, std::map<int64_t, std::string>> metrics;
  for (const auto& [name, stages] : {std::pair{"piped", 2}, std::pair{"alone", 1}}) {
    const std::string db = std::string(name) + ".db";
    Result r =
        sh("timeout 300 " + hippo(db) + "--format json run " + spec(name, stages) + " --workers 2");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(last_json(r.out)["steps_executed"], 2 * (10 + 20 + 20)) << "shared prefixes";
    const json trials = json::parse(sh(hippo(db) + "--format json trials " + name).out);
    ASSERT_EQ(trials.size(), 4u);
    for (const json& t : trials) EXPECT_EQ(t["metrics"].size(), 6u * 3u) << t;
    metrics[name] = metrics_by_trial(trials);
  }
  EXPECT_EQ(metrics["piped"], metrics["alone"]);
}

// The gpt over bpe32k's subwords: the tokenizer reaches the worker with the job (the loss starts
// near ln 32768, not ln 96), and 2 stages give the unpipelined metrics bit for bit, with the
// vocabulary cut across them too ("vocab_parallel" reaches the worker with the job).
TEST_F(PipelinedStudy, Bpe32kStudyHasTheUnpipelinedMetrics) {
  auto spec = [&](const json& pipeline) {
    std::string file = gpt_spec("bpe", pipeline);
    json s = json::parse(std::ifstream(file));
    s["model"]["vocab"] = 32768;
    s["model"]["dim"] = 16;
    s["data"]["tokenizer"] = "bpe32k";
    s["data"]["train_samples"] = 400;
    s["length"]["steps"] = 10;
    std::ofstream(file) << s.dump(2);
    return file;
  };
  Result a = sh("timeout 300 " + hippo("a.db") + "--format json run " +
                spec({{"stages", 2}, {"microbatches", 2}}) + " --workers 1");
  ASSERT_EQ(a.status, 0) << a.out;
  Result b = sh("timeout 300 " + hippo("b.db") + "--format json run " +
                spec({{"stages", 1}, {"microbatches", 2}}) + " --workers 1");
  ASSERT_EQ(b.status, 0) << b.out;
  Result c =
      sh("timeout 300 " + hippo("c.db") + "--format json run " +
         spec({{"stages", 2}, {"microbatches", 2}, {"vocab_parallel", true}}) + " --workers 1");
  ASSERT_EQ(c.status, 0) << c.out;
  json ta = json::parse(sh(hippo("a.db") + "--format json trials bpe").out);
  json tb = json::parse(sh(hippo("b.db") + "--format json trials bpe").out);
  json tc = json::parse(sh(hippo("c.db") + "--format json trials bpe").out);
  ASSERT_EQ(ta.size(), 2u);
  EXPECT_EQ(metrics_by_trial(ta), metrics_by_trial(tb));
  EXPECT_EQ(metrics_by_trial(tc), metrics_by_trial(tb));
  for (const json& m : ta[0]["metrics"]) {
    if (m["name"] == "loss") {
      EXPECT_GT(m["value"].get<double>(), 8.0) << m;  // ln 96 = 4.6
    }
  }
}

TEST_F(PipelinedStudy, GoesOnlyToAWorkerWithEnoughDevices) {
  std::string address = "ipc://" + path("master.sock");
  std::string checkpoints = path("checkpoints");
  pid_t master = spawn(
      {kHippo, "--db", path("plan.db"), "master", "--bind", address, "--checkpoints", checkpoints});
  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "one",
         "--devices", "cpu:1"});
  std::string file = gpt_spec("needs-two", {{"stages", 2}, {"microbatches", 2}});
  Result submitted = sh(kHippo + " --master " + address + " submit " + file);
  ASSERT_EQ(submitted.status, 0) << submitted.out;
  // The master says that no worker can run it, and nothing runs.
  const std::string said =
      "study needs-two needs a worker with 2 devices (pipeline.stages) and "
      "no connected worker has more than 1: start one with --devices cpu:2";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (log_of(master).find(said) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(log_of(master).find(said), std::string::npos) << log_of(master);
  EXPECT_EQ(protocol_status(address, "needs-two"), nullptr);  // still running

  spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "two",
         "--devices", "cpu:2"});
  json summary;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while ((summary = protocol_status(address, "needs-two")).is_null() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_FALSE(summary.is_null()) << log_of(master);
  EXPECT_EQ(summary["status"], "done") << summary.dump();
  EXPECT_EQ(summary["steps_executed"], 40);
}

TEST_F(PipelinedStudy, WorkerRefusesDevicesItDoesNotHave) {
  const std::pair<const char*, const char*> cases[] = {
      {"cuda:0-63", "error: --devices: cuda:0-63 requested, this machine has "},
      {"cpu:0", "error: --devices: expected cpu:N with N from 1 to 256, got \"cpu:0\""},
      {"tpu:1", "error: --devices: expected cpu:N or cuda:A-B, got \"tpu:1\""},
      {"cuda:2-1", "error: --devices: expected cuda:A or cuda:A-B with A <= B, got \"cuda:2-1\""},
  };
  for (const auto& [devices, error] : cases) {
    Result r = sh(kHippo + " worker --master ipc://" + path("none.sock") + " --checkpoints " +
                  path("ck") + " --devices " + devices + " 2>&1");
    EXPECT_EQ(r.status, 2) << devices;
    EXPECT_EQ(r.out.rfind(error, 0), 0u) << r.out;
  }
}

}  // namespace
}  // namespace hippo::e2e
