// The external trainer runner: the stage it writes, the lines it accepts, and real trainer
// processes (small /bin/sh scripts) that behave and misbehave.
#include "worker/external_trainer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace hippo::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ExternalTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-trainer-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A job from 2 to 6 with an lr that halves at step 4, evaluations after steps 4 and 6, and
  // checkpoints after steps 4 (file a.ckpt) and 6 (b.ckpt), run by a /bin/sh script.
  protocol::Job job(const std::string& script) const {
    protocol::Job j;
    j.id = 7;
    j.run.model = {{"type", "external"}, {"command", {"/bin/sh", "-c", script}}};
    j.run.data = "fashion-mnist";
    j.run.train_samples = 128;
    j.run.eval_samples = 64;
    j.run.seed = 3;
    j.run.fixed = {{"batch_size", 32}};
    j.hyperparams["lr"] = piecewise({{0, 0.1}, {4, 0.05}});
    j.hyperparams["optimizer"] = Sequence::text("sgd");
    j.from = 2;
    j.to = 6;
    j.parent_state = 1;
    j.parent_file = "parent.ckpt";
    j.eval_steps = {4, 6};
    j.snapshots = {{4, 11, "a.ckpt"}, {6, 12, "b.ckpt"}};
    return j;
  }

  struct Seen {
    std::vector<std::pair<int64_t, json>> metrics;
    std::vector<int64_t> checkpoints;
    std::vector<int64_t> ticks;
  };
  TrainerHooks hooks(Seen& seen, int tick_ms = 20, double timeout_s = 10) const {
    TrainerHooks h;
    h.metrics = [&](int64_t step, const json& m) { seen.metrics.push_back({step, m}); };
    h.checkpoint = [&](int64_t step) { seen.checkpoints.push_back(step); };
    h.tick = [&](int64_t step) {
      seen.ticks.push_back(step);
      return true;
    };
    h.tick_ms = tick_ms;
    h.timeout_s = timeout_s;
    return h;
  }
  std::string in_dir(const std::string& name) const { return (dir_ / name).string(); }

  // Runs the job and returns the TrainerError's message ("" when it succeeded).
  std::string failure(const std::string& script, double timeout_s = 10) {
    Seen seen;
    try {
      run_external_trainer(job(script), dir_.string(), hooks(seen, 20, timeout_s));
    } catch (const TrainerError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ExternalTrainer, InputHasTheStageAndEveryValue) {
  json in = trainer_input(job("true"), dir_.string());
  EXPECT_EQ(in["from"], 2);
  EXPECT_EQ(in["to"], 6);
  EXPECT_EQ(in["seed"], 3);
  EXPECT_EQ(in["data"]["train_samples"], 128);
  EXPECT_EQ(in["fixed"]["batch_size"], 32);
  EXPECT_EQ(in["input_checkpoint"], in_dir("parent.ckpt"));
  EXPECT_EQ(in["checkpoints"],
            json::parse("[{\"step\": 4, \"path\": \"" + in_dir("a.ckpt") + "\"}, {\"step\": 6, " +
                        "\"path\": \"" + in_dir("b.ckpt") + "\"}]"));
  EXPECT_EQ(in["eval_steps"], json({4, 6}));
  EXPECT_EQ(in["values"]["lr"], json({0.1, 0.1, 0.05, 0.05}));  // steps 2, 3, 4, 5
  EXPECT_EQ(in["values"]["optimizer"], json({"sgd", "sgd", "sgd", "sgd"}));
  EXPECT_EQ(in["hyperparameters"]["lr"]["segments"].size(), 2u);

  protocol::Job root = job("true");
  root.parent_state = -1;
  root.parent_file.clear();
  root.from = 0;
  EXPECT_TRUE(trainer_input(root, dir_.string())["input_checkpoint"].is_null());
  EXPECT_TRUE(fs::path(trainer_input(root, "relative")["checkpoints"][0]["path"]).is_absolute());
}

TEST_F(ExternalTrainer, ParsesTheFourLinesAndRefusesTheRest) {
  TrainerLine m = parse_trainer_line(R"({"step": 4, "metric": "acc", "value": 0.5})");
  EXPECT_EQ(m.kind, TrainerLine::Kind::kMetric);
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.metric, "acc");
  EXPECT_EQ(m.value, 0.5);
  EXPECT_EQ(parse_trainer_line(R"({"checkpoint": 6})").kind, TrainerLine::Kind::kCheckpoint);
  EXPECT_EQ(parse_trainer_line(R"({"step": 5})").kind, TrainerLine::Kind::kProgress);
  EXPECT_EQ(parse_trainer_line(R"({"done": true})").kind, TrainerLine::Kind::kDone);
  for (const char* bad :
       {"", "hello", "[1]", "{\"done\": false}", "{\"done\": true, \"x\": 1}", "{\"step\": -1}",
        "{\"step\": 1.5}", "{\"step\": 99999999999999999999}", "{\"checkpoint\": \"4\"}",
        "{\"step\": 4, \"metric\": \"acc\"}", "{\"step\": 4, \"metric\": \"\", \"value\": 1}",
        "{\"step\": 4, \"metric\": \"acc\", \"value\": \"1\"}",
        "{\"step\": 4, \"metric\": \"acc\", \"value\": NaN}", "{\"other\": 1}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}) {
    EXPECT_THROW(parse_trainer_line(bad), TrainerError) << bad;
  }
  try {
    parse_trainer_line("{\"step\": 4, \"metric\": \"acc\", \"value\": \"1\"}");
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("value: expected a number"), std::string::npos);
  }
}

// A trainer that reads its stage, reports two metrics per evaluation step, writes and announces
// its checkpoints: the hooks see each step's metrics together, in order, and each checkpoint.
TEST_F(ExternalTrainer, RunsAWellBehavedTrainer) {
  const std::string script =
      "read stage; "
      "echo '{\"step\": 3}'; "
      "echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 0.25}'; "
      "echo '{\"step\": 4, \"metric\": \"loss\", \"value\": 2}'; "
      "echo x > " +
      in_dir("a.ckpt") +
      "; echo '{\"checkpoint\": 4}'; "
      "echo '{\"step\": 6, \"metric\": \"acc\", \"value\": 0.5}'; "
      "echo y > " +
      in_dir("b.ckpt") +
      "; "  // not announced: reported with the done line
      "echo '{\"done\": true}'";
  Seen seen;
  EXPECT_TRUE(run_external_trainer(job(script), dir_.string(), hooks(seen)));
  ASSERT_EQ(seen.metrics.size(), 2u);
  EXPECT_EQ(seen.metrics[0].first, 4);
  EXPECT_EQ(seen.metrics[0].second, json({{"acc", 0.25}, {"loss", 2}}));
  EXPECT_EQ(seen.metrics[1].first, 6);
  EXPECT_EQ(seen.metrics[1].second, json({{"acc", 0.5}}));
  EXPECT_EQ(seen.checkpoints, std::vector<int64_t>({4, 6}));
}

TEST_F(ExternalTrainer, EveryMisbehaviourIsAClearError) {
  const std::string metrics =
      "echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 1}'; "
      "echo '{\"step\": 6, \"metric\": \"acc\", \"value\": 1}'; ";
  const std::string files = "touch " + in_dir("a.ckpt") + " " + in_dir("b.ckpt") + "; ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"echo '{\"step\": 5, \"metric\": \"acc\", \"value\": 1}'",
       "a metric for step 5, but the next evaluation step is 4"},
      {metrics + files + "exit 0", "exited without a done line"},
      {metrics + files + "echo '{\"done\": true}'; echo bye >&2; exit 4",
       "exited with status 4; its stderr ends with: bye"},
      {metrics + "echo '{\"done\": true}'", "the checkpoint for step 4 (a.ckpt) was not written"},
      {metrics + "echo '{\"checkpoint\": 5}'", "a checkpoint for step 5, which is not an output"},
      {"echo '{\"done\": true}'", "done, but no metrics came for step 4"},
      {metrics + files + "echo '{\"done\": true}'; echo '{\"step\": 6}'",
       "output after the done line"},
      {"kill -9 $$", "was killed by signal 9"},
      {"echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 1}' '{\"done\": true}'",
       "expected one JSON object on one line"},
  };
  for (const auto& [script, message] : cases) {
    fs::remove(in_dir("a.ckpt"));
    fs::remove(in_dir("b.ckpt"));
    std::string error = failure(script);
    EXPECT_EQ(error.rfind("external trainer: ", 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << script << "\n -> " << error;
  }
  protocol::Job missing = job("");
  missing.run.model["command"] = {in_dir("no-such-program")};
  Seen seen;
  EXPECT_THROW(
      {
        try {
          run_external_trainer(missing, dir_.string(), hooks(seen));
        } catch (const TrainerError& e) {
          EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
          throw;
        }
      },
      TrainerError);
}

// A trainer that exits without reading its stage (here larger than a pipe's buffer) fails the
// stage; the write to its closed stdin does not end this process with SIGPIPE.
TEST_F(ExternalTrainer, TrainerThatIgnoresItsInput) {
  protocol::Job long_stage = job("exit 0");
  long_stage.to = 200000;
  long_stage.eval_steps = {200000};
  long_stage.snapshots.clear();
  Seen seen;
  try {
    run_external_trainer(long_stage, dir_.string(), hooks(seen));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("exited without a done line"), std::string::npos)
        << e.what();
  }
}

// Silence past the timeout kills the trainer, and so does an abandoned stage: the whole process
// group goes, not only the command itself.
TEST_F(ExternalTrainer, TimeoutAndAbandonKillTheProcessGroup) {
  auto started = std::chrono::steady_clock::now();
  std::string error = failure("sleep 30", 0.3);
  EXPECT_NE(error.find("no output line for"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));

  std::string pid_file = in_dir("child.pid");
  Seen seen;
  TrainerHooks h = hooks(seen);
  h.tick = [&](int64_t) { return !fs::exists(pid_file); };
  EXPECT_FALSE(
      run_external_trainer(job("sleep 30 & echo $! > " + pid_file + "; wait"), dir_.string(), h));
  std::ifstream in(pid_file);
  pid_t grandchild = 0;
  in >> grandchild;
  ASSERT_GT(grandchild, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = kill(grandchild, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "the trainer's own child survived";
}

}  // namespace
}  // namespace hippo::worker
