// The external trainer runner: the stage it writes, the lines it accepts, and real trainer
// processes (small /bin/sh scripts) that behave and misbehave, one-shot and long-lived.
#include "worker/external_trainer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "protocol/content_hash.h"

namespace hippo::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ExternalTrainers : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-trainer-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(in_dir("parent.ckpt")) << "the parent state";  // the jobs' parent_file
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
    std::vector<WrittenFile> written;
    std::vector<int64_t> ticks;
  };
  TrainerHooks hooks(Seen& seen, int tick_ms = 20, double timeout_s = 10) const {
    TrainerHooks h;
    h.metrics = [&](int64_t step, const json& m) { seen.metrics.push_back({step, m}); };
    h.checkpoint = [&](int64_t step, const WrittenFile& file) {
      seen.checkpoints.push_back(step);
      seen.written.push_back(file);
    };
    h.tick = [&](int64_t step) {
      seen.ticks.push_back(step);
      return true;
    };
    h.tick_ms = tick_ms;
    h.timeout_s = timeout_s;
    return h;
  }
  std::string in_dir(const std::string& name) const { return (dir_ / name).string(); }

  // Runs a job on a trainer of its own (one-shot unless the job says long_lived).
  bool run_once(const protocol::Job& j, const TrainerHooks& h) const {
    ExternalTrainer trainer;
    return trainer.run(j, dir_.string(), h);
  }

  // Runs the job and returns the TrainerError's message ("" when it succeeded); `crashed` gets
  // whether the error says that the process died.
  std::string failure(const std::string& script, double timeout_s = 10, bool* crashed = nullptr) {
    Seen seen;
    try {
      run_once(job(script), hooks(seen, 20, timeout_s));
    } catch (const TrainerError& e) {
      if (crashed) *crashed = e.crashed;
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(ExternalTrainers, InputHasTheStageAndEverySequence) {
  json in = trainer_input(job("true"), dir_.string(), in_dir("parent.ckpt"));
  EXPECT_EQ(in["from"], 2);
  EXPECT_EQ(in["to"], 6);
  EXPECT_EQ(in["seed"], 3);
  EXPECT_EQ(in["data"]["train_samples"], 128);
  EXPECT_EQ(in["fixed"]["batch_size"], 32);
  EXPECT_EQ(in["input_checkpoint"], in_dir("parent.ckpt"));
  EXPECT_EQ(in["checkpoints"],
            json::parse("[{\"step\": 4, \"path\": \"" + in_dir("a.ckpt") + "\", \"state\": 11}, " +
                        "{\"step\": 6, \"path\": \"" + in_dir("b.ckpt") + "\", \"state\": 12}]"));
  EXPECT_EQ(in["eval_steps"], json({4, 6}));
  EXPECT_EQ(in["hyperparameters"]["lr"], json::parse(R"({"segments": [
                {"kind": "constant", "start": 0, "end": 4, "v0": 0.1},
                {"kind": "constant", "start": 4, "v0": 0.05}]})"));
  EXPECT_EQ(in["hyperparameters"]["optimizer"], json({{"text", "sgd"}}));
  EXPECT_FALSE(in.contains("values"));  // nothing per step: the trainer computes from segments

  EXPECT_EQ(in["input_state"], 1);
  EXPECT_EQ(in["checkpoints"][1]["state"], 12);
  EXPECT_FALSE(in.contains("held"));  // a one-shot trainer's input
  const std::vector<int64_t> held = {3, 5};
  EXPECT_EQ(trainer_input(job("true"), dir_.string(), "", &held)["held"], json({3, 5}));
  EXPECT_TRUE(in["input_checksum"].is_null());  // unknown: not compared
  protocol::Job hashed = job("true");
  hashed.parent_checksum = protocol::content_hash("the parent state");
  EXPECT_EQ(trainer_input(hashed, dir_.string(), "/proc/1/fd/3")["input_checksum"],
            hashed.parent_checksum);

  protocol::Job root = job("true");
  root.parent_state = -1;
  root.parent_file.clear();
  root.from = 0;
  EXPECT_TRUE(trainer_input(root, dir_.string(), "")["input_checkpoint"].is_null());
  EXPECT_TRUE(trainer_input(root, dir_.string(), "")["input_state"].is_null());
  EXPECT_TRUE(
      fs::path(trainer_input(root, "relative", "")["checkpoints"][0]["path"]).is_absolute());

  // A data set of the user's own: its fields as written, sizes only where the spec gave them.
  protocol::Job own = job("true");
  own.run.data = "my-corpus";
  own.run.train_samples = 0;
  own.run.eval_samples = 0;
  own.run.data_fields = {{"path", "/data/corpus.txt"}, {"vocab", {{"size", 256}}}};
  EXPECT_EQ(
      trainer_input(own, dir_.string(), "")["data"],
      json({{"name", "my-corpus"}, {"path", "/data/corpus.txt"}, {"vocab", {{"size", 256}}}}));
}

// A trainer is told its worker's device (the one GPU it sees is its cuda:0) and thread count.
TEST_F(ExternalTrainers, InputNamesTheDeviceAndThreads) {
  json on_cpu = trainer_input(job("true"), dir_.string(), "");
  EXPECT_EQ(on_cpu["device"], "cpu");
  EXPECT_EQ(on_cpu["threads"], 1);
  json on_gpu = trainer_input(job("true"), dir_.string(), "", nullptr, {"cuda:3", 4});
  EXPECT_EQ(on_gpu["device"], "cuda:0");
  EXPECT_EQ(on_gpu["threads"], 4);
  EXPECT_EQ(trainer_input(job("true"), dir_.string(), "", nullptr, {"cpu:avx2", 2})["device"],
            "cpu");
}

// The environment depends on the worker's place alone, whatever the worker inherited.
TEST_F(ExternalTrainers, EnvironmentIsFixedByTheWorkersPlace) {
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  // A worker on its cuda:1 whose own visible GPUs are 4 and 5, started by a shell with 8 OpenMP
  // threads, OPENBLAS_CORETYPE set by the worker itself (kernels/blas_env.h).
  const std::vector<std::string> inherited = {"PATH=/bin", "CUDA_VISIBLE_DEVICES=4,5",
                                              "OMP_NUM_THREADS=8", "OPENBLAS_CORETYPE=Haswell",
                                              "HIPPO_SET_OPENBLAS_CORETYPE=1"};
  EXPECT_EQ(sorted(trainer_environment({"cuda:1", 2}, inherited)),
            sorted({"PATH=/bin", "CUDA_VISIBLE_DEVICES=5", "OMP_NUM_THREADS=2", "MKL_NUM_THREADS=2",
                    "OPENBLAS_NUM_THREADS=2", "CUBLAS_WORKSPACE_CONFIG=:4096:8"}));
  // Without the worker's own list, cuda:N is the machine's N; a user's cuBLAS setting is kept.
  EXPECT_EQ(sorted(trainer_environment({"cuda:1", 1}, {"CUBLAS_WORKSPACE_CONFIG=:16:8"})),
            sorted({"CUBLAS_WORKSPACE_CONFIG=:16:8", "CUDA_VISIBLE_DEVICES=1", "OMP_NUM_THREADS=1",
                    "MKL_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}));
  // A CPU worker's trainer sees no GPU; the user's own OPENBLAS_CORETYPE stays.
  EXPECT_EQ(sorted(trainer_environment({"cpu", 3}, {"OPENBLAS_CORETYPE=Zen", "HOME=/root"})),
            sorted({"OPENBLAS_CORETYPE=Zen", "HOME=/root", "CUDA_VISIBLE_DEVICES=",
                    "OMP_NUM_THREADS=3", "MKL_NUM_THREADS=3", "OPENBLAS_NUM_THREADS=3"}));
}

// A real trainer process starts in that environment and reads the stage's device.
TEST_F(ExternalTrainers, TheTrainerProcessSeesItsPlace) {
  // Reports its OMP_NUM_THREADS, whether the stage says "cpu", and whether GPUs are hidden
  // (CUDA_VISIBLE_DEVICES set and empty).
  const std::string script = R"(read stage
case "$stage" in *'"device":"cpu"'*) cpu=1;; *) cpu=0;; esac
[ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] && hidden=1 || hidden=0
for m in "threads $OMP_NUM_THREADS" "cpu $cpu" "hidden $hidden"; do
  set -- $m; printf '{"step": 4, "metric": "%s", "value": %s}\n' "$1" "$2"
done
echo x > "$0/a.ckpt"; echo y > "$0/b.ckpt"
printf '{"step": 6, "metric": "threads", "value": 0}\n{"done": true}\n')";
  protocol::Job j = job(script);
  j.run.model["command"].push_back(dir_.string());  // $0 of the script
  Seen seen;
  ExternalTrainer trainer({"cpu", 3});
  EXPECT_TRUE(trainer.run(j, dir_.string(), hooks(seen)));
  ASSERT_FALSE(seen.metrics.empty());
  EXPECT_EQ(seen.metrics[0].second, json({{"threads", 3}, {"cpu", 1}, {"hidden", 1}}));
}

TEST_F(ExternalTrainers, ParsesItsLinesAndRefusesTheRest) {
  TrainerLine m = parse_trainer_line(R"({"step": 4, "metric": "acc", "value": 0.5})");
  EXPECT_EQ(m.kind, TrainerLine::Kind::kMetric);
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.metric, "acc");
  EXPECT_EQ(m.value, 0.5);
  EXPECT_EQ(parse_trainer_line(R"({"checkpoint": 6})").kind, TrainerLine::Kind::kCheckpoint);
  EXPECT_EQ(parse_trainer_line(R"({"step": 5})").kind, TrainerLine::Kind::kProgress);
  EXPECT_EQ(parse_trainer_line(R"({"done": true})").kind, TrainerLine::Kind::kDone);
  EXPECT_EQ(parse_trainer_line(R"({"done": true, "held": [3, 7]})").held,
            std::vector<int64_t>({3, 7}));
  // A diverging model: its metric's value is one of JSON's stand-ins for NaN and infinities,
  // and its stage may end at that evaluation.
  EXPECT_TRUE(
      std::isnan(parse_trainer_line(R"({"step": 4, "metric": "loss", "value": "nan"})").value));
  EXPECT_EQ(parse_trainer_line(R"({"step": 4, "metric": "loss", "value": "inf"})").value, INFINITY);
  EXPECT_EQ(parse_trainer_line(R"({"step": 4, "metric": "loss", "value": "-inf"})").value,
            -INFINITY);
  TrainerLine diverged = parse_trainer_line(R"({"diverged": 4, "held": [3]})");
  EXPECT_EQ(diverged.kind, TrainerLine::Kind::kDiverged);
  EXPECT_EQ(diverged.step, 4);
  EXPECT_EQ(diverged.held, std::vector<int64_t>({3}));
  // Where the stage's time went, as the trainer measured it (the Python helper writes it).
  TrainerLine timed = parse_trainer_line(
      R"({"done": true, "held": [3], "times": {"setup": 0.5, "load": 0.25, "train": 2, )"
      R"("eval": 0.125, "save": 0.0625, "ready_at": 1234.5}})");
  EXPECT_EQ(timed.held, std::vector<int64_t>({3}));
  EXPECT_EQ(
      timed.times,
      (protocol::JobTimes{.setup = 0.5, .load = 0.25, .train = 2, .eval = 0.125, .save = 0.0625}));
  EXPECT_EQ(timed.ready_at, 1234.5);
  EXPECT_FALSE(parse_trainer_line(R"({"diverged": 4, "times": {"train": 1}})").ready_at);
  for (const char* bad :
       {"{\"done\": true, \"times\": 3}", "{\"done\": true, \"times\": {\"train\": -1}}",
        "{\"done\": true, \"times\": {\"train\": \"1\"}}",
        "{\"done\": true, \"times\": {\"train\": 1e300}}",
        "{\"done\": true, \"times\": {\"fetch\": 1}}",
        "{\"done\": true, \"times\": {}, \"x\": 1}"}) {
    EXPECT_THROW(parse_trainer_line(bad), TrainerError) << bad;
  }
  for (const char* bad : {"",
                          "hello",
                          "[1]",
                          "{\"done\": false}",
                          "{\"done\": true, \"x\": 1}",
                          "{\"step\": -1}",
                          "{\"done\": true, \"held\": 3}",
                          "{\"done\": true, \"held\": [-1]}",
                          "{\"done\": true, \"held\": [\"3\"]}",
                          "{\"done\": false, \"held\": []}",
                          "{\"step\": 1.5}",
                          "{\"step\": 99999999999999999999}",
                          "{\"checkpoint\": \"4\"}",
                          "{\"step\": 4, \"metric\": \"acc\"}",
                          "{\"step\": 4, \"metric\": \"\", \"value\": 1}",
                          "{\"step\": 4, \"metric\": \"acc\", \"value\": \"1\"}",
                          "{\"step\": 4, \"metric\": \"acc\", \"value\": NaN}",
                          "{\"other\": 1}",
                          "{\"step\": 4, \"metric\": \"acc\", \"value\": \"NaN\"}",
                          "{\"diverged\": -1}",
                          "{\"diverged\": 4, \"x\": 1}",
                          "{\"diverged\": true}",
                          "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}) {
    EXPECT_THROW(parse_trainer_line(bad), TrainerError) << bad;
  }
  try {
    parse_trainer_line("{\"step\": 4, \"metric\": \"acc\", \"value\": \"1\"}");
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("value: expected a number"), std::string::npos);
  }
}

// A trainer whose model diverges at its first evaluation ends the stage there: the hooks see the
// NaN, no checkpoint after it is asked for, and the trainer says where it stopped. One that says
// it diverged where it reported nothing is refused.
TEST_F(ExternalTrainers, ADivergingTrainerEndsItsStageAtThatEvaluation) {
  const std::string script =
      "read stage; "
      "echo '{\"step\": 4, \"metric\": \"loss\", \"value\": \"nan\"}'; "
      "echo '{\"diverged\": 4}'";
  Seen seen;
  ExternalTrainer trainer;
  EXPECT_TRUE(trainer.run(job(script), dir_.string(), hooks(seen)));
  EXPECT_EQ(trainer.diverged_at(), 4);
  ASSERT_EQ(seen.metrics.size(), 1u);
  EXPECT_TRUE(std::isnan(seen.metrics[0].second["loss"].get<double>()));
  EXPECT_TRUE(seen.checkpoints.empty());
  EXPECT_NE(failure("read stage; echo '{\"diverged\": 4}'")
                .find("diverged at step 4, which is not the last evaluation it reported"),
            std::string::npos);
}

// A trainer that reads its stage, reports two metrics per evaluation step, writes and announces
// its checkpoints: the hooks see each step's metrics together, in order, and each checkpoint.
TEST_F(ExternalTrainers, RunsAWellBehavedTrainer) {
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
  EXPECT_TRUE(run_once(job(script), hooks(seen)));
  ASSERT_EQ(seen.metrics.size(), 2u);
  EXPECT_EQ(seen.metrics[0].first, 4);
  EXPECT_EQ(seen.metrics[0].second, json({{"acc", 0.25}, {"loss", 2}}));
  EXPECT_EQ(seen.metrics[1].first, 6);
  EXPECT_EQ(seen.metrics[1].second, json({{"acc", 0.5}}));
  EXPECT_EQ(seen.checkpoints, std::vector<int64_t>({4, 6}));
}

// A trainer that writes its checkpoints in the background (the Python helper's serve(build=...))
// announces one after lines of later steps: taken, in step order, the metrics kept together.
TEST_F(ExternalTrainers, ACheckpointAnnouncedAfterLaterStepsIsTaken) {
  const std::string script =
      "read stage; "
      "echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 0.25}'; "
      "echo '{\"step\": 5}'; "
      "echo '{\"step\": 6, \"metric\": \"acc\", \"value\": 0.5}'; "
      "echo '{\"step\": 6, \"metric\": \"loss\", \"value\": 1}'; "
      "echo x > " +
      in_dir("a.ckpt") +
      "; echo '{\"checkpoint\": 4}'; "
      "echo y > " +
      in_dir("b.ckpt") +
      "; echo '{\"checkpoint\": 6}'; "
      "echo '{\"done\": true}'";
  Seen seen;
  EXPECT_TRUE(run_once(job(script), hooks(seen)));
  ASSERT_EQ(seen.metrics.size(), 2u);
  EXPECT_EQ(seen.metrics[1], (std::pair<int64_t, json>{6, {{"acc", 0.5}, {"loss", 1}}}));
  EXPECT_EQ(seen.checkpoints, std::vector<int64_t>({4, 6}));
}

// A spec may ask for 10^9 steps (issue 29): the stage line carries each sequence's segments,
// so the worker builds nothing per step, and the line a real trainer reads is as long for 10^9
// steps as for 10 but for the digits of "to" (it used to carry one value per step and
// hyper-parameter: 10^9 numbers, std::bad_alloc under a 3 GB address-space cap).
TEST_F(ExternalTrainers, ABillionStepsMakeALineAsShortAsTenSteps) {
  auto line_bytes = [&](int64_t to) {
    protocol::Job j = job("read -r line; printf %s \"$line\" | wc -c > " + in_dir("bytes") +
                          "; echo '{\"done\": true}'");
    j.from = 0;
    j.to = to;
    j.parent_state = -1;
    j.parent_file.clear();
    j.eval_steps.clear();
    j.snapshots.clear();
    Seen seen;
    EXPECT_TRUE(run_once(j, hooks(seen)));
    std::ifstream f(in_dir("bytes"));
    int64_t bytes = 0;
    f >> bytes;
    return bytes;
  };
  const int64_t ten = line_bytes(10);
  EXPECT_GT(ten, 100);
  EXPECT_EQ(line_bytes(1'000'000'000), ten + 8);  // "1000000000" for "10"
}

// The Python helper (python/hippo) computes stage.value(name, step) from the segments: bit for
// bit what the worker's engine computes (Sequence::value_at), for every kind of segment, near
// step 0 and near step 10^9. A real trainer process reports each value as a metric.
TEST_F(ExternalTrainers, ThePythonHelperComputesEveryValueAsTheEngine) {
  const std::string script =
      std::string("import sys\nsys.path.insert(0, '") + HIPPO_PYTHON +
      "')\n"
      "import hippo\n"
      "def train(stage):\n"
      "    states = iter(range(stage.start, stage.end))\n"
      "    def evaluate():\n"
      "        s = next(states)\n"
      "        return {n: stage.value(n, s) for n in stage.hyperparameters}\n"
      "    for _ in stage.steps(evaluate=evaluate):\n"
      "        pass\n"
      "hippo.serve(train)\n";
  using K = SegmentKind;
  const int64_t g = 1'000'000'000;
  Hyperparams hp;
  hp["lr"] = Sequence::from_segments(
      {{.kind = K::kLinear, .start = 0, .end = 7, .v0 = 0, .v1 = 0.1},
       {.kind = K::kCosine, .start = 7, .end = 2 * g, .v0 = 0.1, .v1 = 1e-3},
       {.start = 2 * g, .v0 = 1e-3}});
  hp["linear_decay"] = Sequence::from_segments(
      {{.start = 0, .end = 5, .v0 = 0.3},
       {.kind = K::kLinearDecay, .start = 5, .end = g + 5, .v0 = 0.3, .v1 = 3e-3},
       {.start = g + 5, .v0 = 3e-3}});
  hp["cosine_decay"] = Sequence::from_segments(
      {{.kind = K::kCosineDecay, .start = 0, .end = g + 11, .v0 = 1.7, .v1 = 0.2},
       {.start = g + 11, .v0 = 0.2}});
  hp["sqrt_decay"] = Sequence::from_segments(
      {{.kind = K::kSqrtDecay, .start = 0, .end = 33, .v0 = 1, .v1 = 1e-3},
       {.start = 33, .end = g - 10, .v0 = 1e-3},
       {.kind = K::kSqrtDecay, .start = g - 10, .end = g + 10, .v0 = 1e-3, .v1 = 1e-5},
       {.start = g + 10, .v0 = 1e-5}});
  hp["weight_decay"] = Sequence::from_segments(
      {{.kind = K::kExponential, .start = 0, .v0 = 0.5, .gamma = 0.9999999, .period = 7}});
  for (const int64_t from : {int64_t{0}, g - 20}) {
    protocol::Job j = job("");
    j.run.model["command"] = {"/usr/bin/python3", "-c", script};
    j.hyperparams = hp;
    j.from = from;
    j.to = from + 40;
    j.parent_state = -1;
    j.parent_file.clear();
    j.snapshots.clear();
    j.eval_steps.clear();
    for (int64_t s = j.from; s < j.to; ++s) j.eval_steps.push_back(s);
    Seen seen;
    ASSERT_TRUE(run_once(j, hooks(seen)));
    ASSERT_EQ(seen.metrics.size(), 40u);
    for (const auto& [step, metrics] : seen.metrics)
      for (const auto& [name, seq] : hp)
        EXPECT_EQ(std::bit_cast<uint64_t>(metrics.at(name).get<double>()),
                  std::bit_cast<uint64_t>(seq.value_at(step)))
            << name << " at step " << step << ": " << metrics.at(name).get<double>() << " vs "
            << seq.value_at(step);
  }
}

TEST_F(ExternalTrainers, EveryMisbehaviourIsAClearError) {
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
  // The process died without finishing its stage: a new one may succeed (the master retries);
  // anything else breaks the protocol and fails the stage at once.
  const std::set<std::string> crashes = {"exited without a done line", "exited with status 4",
                                         "was killed by signal 9"};
  for (const auto& [script, message] : cases) {
    fs::remove(in_dir("a.ckpt"));
    fs::remove(in_dir("b.ckpt"));
    bool crashed = false;
    std::string error = failure(script, 10, &crashed);
    EXPECT_EQ(error.rfind("external trainer: ", 0), 0u) << error;
    EXPECT_NE(error.find(message), std::string::npos) << script << "\n -> " << error;
    EXPECT_EQ(crashed, std::any_of(crashes.begin(), crashes.end(),
                                   [&](const std::string& c) {
                                     return message.find(c) != std::string::npos;
                                   }))
        << message;
  }
  protocol::Job missing = job("");
  missing.run.model["command"] = {in_dir("no-such-program")};
  Seen seen;
  EXPECT_THROW(
      {
        try {
          run_once(missing, hooks(seen));
        } catch (const TrainerError& e) {
          EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
          throw;
        }
      },
      TrainerError);
}

// A trainer that exits without reading its stage (here larger than a pipe's buffer) fails the
// stage; the write to its closed stdin does not end this process with SIGPIPE.
TEST_F(ExternalTrainers, TrainerThatIgnoresItsInput) {
  protocol::Job long_stage = job("exit 0");
  long_stage.to = 200000;
  long_stage.eval_steps = {200000};
  long_stage.snapshots.clear();
  Seen seen;
  try {
    run_once(long_stage, hooks(seen));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("exited without a done line"), std::string::npos)
        << e.what();
  }
}

// Silence past the timeout kills the trainer, and so does an abandoned stage: the whole process
// group goes, not only the command itself.
TEST_F(ExternalTrainers, TimeoutAndAbandonKillTheProcessGroup) {
  auto started = std::chrono::steady_clock::now();
  std::string error = failure("sleep 30", 0.3);
  EXPECT_NE(error.find("no output line for"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));

  std::string pid_file = in_dir("child.pid");
  Seen seen;
  TrainerHooks h = hooks(seen);
  h.tick = [&](int64_t) { return !fs::exists(pid_file); };
  EXPECT_FALSE(run_once(job("sleep 30 & echo $! > " + pid_file + "; wait"), h));
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

// A long-lived trainer (model.long_lived) is started once: the second stage of the same run spec
// goes to the same process as the next line on its stdin, with the states it said it holds.
// Another run spec, or states the worker no longer vouches for, are not carried over.
TEST_F(ExternalTrainers, LongLivedTrainerServesStageAfterStage) {
  const std::string inputs = in_dir("inputs.jsonl");
  // Reports its stage count as the metric, holds the state of b.ckpt (id 12).
  const std::string script =
      "n=0; while read -r stage; do n=$((n+1)); printf '%s\\n' \"$stage\" >> " + inputs +
      "; echo \"{\\\"step\\\": 4, \\\"metric\\\": \\\"acc\\\", \\\"value\\\": $n}\"; "
      "echo \"{\\\"step\\\": 6, \\\"metric\\\": \\\"acc\\\", \\\"value\\\": $n}\"; "
      "touch " +
      in_dir("a.ckpt") + " " + in_dir("b.ckpt") + "; echo '{\"done\": true, \"held\": [12]}'; done";
  protocol::Job stage = job(script);
  stage.run.model["long_lived"] = true;
  ExternalTrainer trainer;
  Seen seen;
  ASSERT_TRUE(trainer.run(stage, dir_.string(), hooks(seen)));
  const pid_t first = trainer.kept_pid();
  EXPECT_GT(first, 0);
  EXPECT_EQ(trainer.held(), std::vector<int64_t>({12}));

  stage.id = 8;
  ASSERT_TRUE(trainer.run(stage, dir_.string(), hooks(seen), /*may_hold=*/{12}));
  EXPECT_EQ(trainer.kept_pid(), first);
  ASSERT_EQ(seen.metrics.size(), 4u);
  EXPECT_EQ(seen.metrics[3].second, json({{"acc", 2}}));  // the same process's second stage

  // The worker forgot state 12 (its master restarted): the trainer is told to forget it too.
  ASSERT_TRUE(trainer.run(stage, dir_.string(), hooks(seen), /*may_hold=*/{}));
  EXPECT_EQ(seen.metrics.back().second, json({{"acc", 3}}));

  // Another run spec: a new process.
  stage.run.seed = 4;
  ASSERT_TRUE(trainer.run(stage, dir_.string(), hooks(seen), {12}));
  EXPECT_NE(trainer.kept_pid(), first);
  EXPECT_EQ(seen.metrics.back().second, json({{"acc", 1}}));

  std::ifstream in(inputs);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["held"], json::array());
  EXPECT_EQ(lines[1]["held"], json({12}));
  EXPECT_EQ(lines[2]["held"], json::array());
  EXPECT_EQ(lines[3]["held"], json::array());

  trainer.stop();
  EXPECT_EQ(trainer.kept_pid(), -1);
  EXPECT_TRUE(trainer.held().empty());
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = kill(first, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

// A trainer whose start takes 0.3 s (a PyTorch import) and says when it was ready: a stage waits
// for that start unless the trainer was started ahead of it (prepare), and its times say so.
TEST_F(ExternalTrainers, ATrainerStartedAheadSpendsNoStageOnItsStart) {
  const std::string script = R"(
import json, sys, time
time.sleep(0.3)
ready = time.monotonic()
for line in sys.stdin:
    for step in (4, 6):
        print(json.dumps({"step": step, "metric": "acc", "value": 1}))
    for name in ("a.ckpt", "b.ckpt"):
        open(")" + dir_.string() +
                             R"(/" + name, "w").close()
    times = {"train": 0.01}
    if ready is not None:
        times["ready_at"], ready = ready, None
    print(json.dumps({"done": True, "times": times}), flush=True)
)";
  protocol::Job stage = job("");
  stage.run.model = {
      {"type", "external"}, {"command", {"/usr/bin/python3", "-c", script}}, {"long_lived", true}};
  Seen seen;
  ExternalTrainer cold;
  ASSERT_TRUE(cold.run(stage, dir_.string(), hooks(seen)));
  EXPECT_GE(cold.times().start, 0.25);  // the stage waited for the import
  EXPECT_EQ(cold.times().train, 0.01);
  ASSERT_TRUE(cold.run(stage, dir_.string(), hooks(seen)));
  EXPECT_EQ(cold.times().start, 0);  // its second stage: nothing to wait for

  ExternalTrainer warm;
  ASSERT_TRUE(warm.prepare(stage.run));
  const pid_t started = warm.kept_pid();
  EXPECT_FALSE(warm.prepare(stage.run));  // one is kept: never replaced for this
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_TRUE(warm.run(stage, dir_.string(), hooks(seen)));
  EXPECT_EQ(warm.kept_pid(), started);
  EXPECT_LT(warm.times().start, 0.05);  // ready before the stage came

  ExternalTrainer one_shot;  // a one-shot trainer serves one stage: nothing to start ahead
  stage.run.model["long_lived"] = false;
  EXPECT_FALSE(one_shot.prepare(stage.run));
  EXPECT_EQ(one_shot.kept_pid(), -1);
}

// A long-lived trainer that exits after its done line is started anew for the next stage; one
// that claims a state it was never given, or prints between stages, fails the stage.
TEST_F(ExternalTrainers, LongLivedTrainerMisbehaviours) {
  const std::string stage_lines =
      "echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 1}'; "
      "echo '{\"step\": 6, \"metric\": \"acc\", \"value\": 1}'; touch " +
      in_dir("a.ckpt") + " " + in_dir("b.ckpt") + "; ";
  auto long_lived = [&](const std::string& script) {
    protocol::Job j = job(script);
    j.run.model["long_lived"] = true;
    return j;
  };
  ExternalTrainer trainer;
  Seen seen;
  // Serves one stage and exits: fine, and the next stage gets a new process.
  protocol::Job once = long_lived("read stage; " + stage_lines + "echo '{\"done\": true}'");
  ASSERT_TRUE(trainer.run(once, dir_.string(), hooks(seen)));
  const pid_t first = trainer.kept_pid();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(trainer.run(once, dir_.string(), hooks(seen)));
  EXPECT_NE(trainer.kept_pid(), first);
  trainer.stop();

  protocol::Job liar = long_lived("while read stage; do " + stage_lines +
                                  "echo '{\"done\": true, \"held\": [99]}'; done");
  try {
    trainer.run(liar, dir_.string(), hooks(seen));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("held: state 99 is none of the states"), std::string::npos)
        << e.what();
    EXPECT_FALSE(e.crashed);
  }
  EXPECT_EQ(trainer.kept_pid(), -1);

  protocol::Job chatty = long_lived("while read stage; do " + stage_lines +
                                    "echo '{\"done\": true}'; sleep 0.1; echo hello; done");
  ASSERT_TRUE(trainer.run(chatty, dir_.string(), hooks(seen)));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  try {
    trainer.run(chatty, dir_.string(), hooks(seen));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("output after its done line, before the next stage"),
              std::string::npos)
        << e.what();
  }

  // Silent on its second stage: the timeout, as for a one-shot trainer.
  protocol::Job mute = long_lived("read -r stage; " + stage_lines +
                                  "echo '{\"done\": true}'; read -r stage; sleep 30");
  ASSERT_TRUE(trainer.run(mute, dir_.string(), hooks(seen)));
  try {
    trainer.run(mute, dir_.string(), hooks(seen, 20, 0.3));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_NE(std::string(e.what()).find("no output line for 0.3 s"), std::string::npos)
        << e.what();
    EXPECT_FALSE(e.crashed);
  }
  EXPECT_EQ(trainer.kept_pid(), -1);

  // Killed mid-stage: a crash (the master retries the stage), and nothing is kept.
  protocol::Job killed = long_lived("while read stage; do kill -9 $$; done");
  try {
    trainer.run(killed, dir_.string(), hooks(seen));
    ADD_FAILURE() << "no error";
  } catch (const TrainerError& e) {
    EXPECT_TRUE(e.crashed) << e.what();
    EXPECT_NE(std::string(e.what()).find("killed by signal 9"), std::string::npos) << e.what();
  }
  EXPECT_EQ(trainer.kept_pid(), -1);
  EXPECT_TRUE(trainer.held().empty());
}

// Issue 43, item 1: the worker checked the parent's content hash, then gave the trainer the file's
// path, and whoever may write in the checkpoint directory replaced the file in between: the
// trainer trained on the forgery. Here the trainer itself plays that neighbour at the worst moment
// (after the worker's check, before its own read): it renames a forged file over the parent, or,
// where the parent is writable by others, writes into it. It reads the checked bytes all the same
// (through the worker's descriptor, or its private sealed copy), and a parent whose bytes are not
// its producer's is refused before any trainer starts.
TEST_F(ExternalTrainers, TheTrainerReadsTheBytesTheWorkerChecked) {
  const std::string good = "the parent state";
  const std::string script = R"(
import json, os, sys
stage = json.loads(sys.stdin.readline())
parent, attack, started = sys.argv[1], sys.argv[2], sys.argv[3]
open(started, "w").close()
if attack == "rename":
    with open(parent + ".forged", "wb") as f:
        f.write(b"forged, CRC and all")
    os.replace(parent + ".forged", parent)
else:
    with open(parent, "r+b") as f:
        f.write(b"forged")
with open(stage["input_checkpoint"], "rb") as f:
    got = f.read()
for s in stage["eval_steps"]:
    print(json.dumps({"step": s, "metric": "acc", "value": 1 if got == b"the parent state" else 0}))
for c in stage["checkpoints"]:
    with open(c["path"], "wb") as f:
        f.write(b"x")
print(json.dumps({"done": True}))
)";
  const std::string started = in_dir("started");
  for (const auto& [attack, mode, copied] :
       {std::tuple{"rename", 0600, false}, std::tuple{"in-place", 0666, true}}) {
    fs::remove(in_dir("a.ckpt"));
    fs::remove(in_dir("b.ckpt"));
    std::ofstream(in_dir("parent.ckpt"), std::ios::trunc) << good;
    ASSERT_EQ(::chmod(in_dir("parent.ckpt").c_str(), mode), 0);
    EXPECT_EQ(VerifiedInput(in_dir("parent.ckpt"), "").copied(), copied) << attack;
    protocol::Job j = job("");
    j.run.model["command"] = {"/usr/bin/python3",    "-c",   script,
                              in_dir("parent.ckpt"), attack, started};
    j.parent_checksum = protocol::content_hash(good);
    Seen seen;
    ASSERT_TRUE(run_once(j, hooks(seen))) << attack;
    ASSERT_EQ(seen.metrics.size(), 2u) << attack;
    for (const auto& [step, metrics] : seen.metrics)
      EXPECT_EQ(metrics, json({{"acc", 1}})) << attack << ": the trainer read the forgery";
  }
  // The file on disk is the forgery now: refused before the trainer starts.
  fs::remove(started);
  protocol::Job j = job("");
  j.run.model["command"] = {"/usr/bin/python3",    "-c",     script,
                            in_dir("parent.ckpt"), "rename", started};
  j.parent_checksum = protocol::content_hash(good);
  Seen seen;
  try {
    run_once(j, hooks(seen));
    ADD_FAILURE() << "a forged parent was given to the trainer";
  } catch (const TrainerFileError& e) {
    EXPECT_NE(std::string(e.what()).find("its producer wrote " + j.parent_checksum),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(started));
}

// Issue 43, item 1, the output side: the worker hashed a trainer's checkpoint when it was told the
// file was written, and vouched for whatever the file held then. A trainer (the Python helper)
// says the hash of what it wrote; a file replaced before the worker reads it is refused. The bytes
// the hooks see (size, hash) are those read through one descriptor.
TEST_F(ExternalTrainers, ACheckpointReplacedAfterItsWriteIsRefused) {
  const std::string x = protocol::content_hash("x");
  auto script = [&](const std::string& replace) {
    return "read stage; echo '{\"step\": 4, \"metric\": \"acc\", \"value\": 1}'; printf x > " +
           in_dir("a.ckpt") + "; " + replace + "echo '{\"checkpoint\": 4, \"checksum\": \"" + x +
           "\"}'; echo '{\"step\": 6, \"metric\": \"acc\", \"value\": 1}'; printf yy > " +
           in_dir("b.ckpt") + "; echo '{\"done\": true}'";
  };
  Seen seen;
  ASSERT_TRUE(run_once(job(script("")), hooks(seen)));
  ASSERT_EQ(seen.written.size(), 2u);
  EXPECT_EQ(seen.written[0].bytes, 1);
  EXPECT_EQ(seen.written[0].content_hash, x);
  EXPECT_EQ(seen.written[1].bytes, 2);  // said nothing: what the file holds when it is read
  EXPECT_EQ(seen.written[1].content_hash, protocol::content_hash("yy"));

  fs::remove(in_dir("a.ckpt"));
  fs::remove(in_dir("b.ckpt"));
  const std::string error = failure(
      script("printf y > " + in_dir("t") + "; mv " + in_dir("t") + " " + in_dir("a.ckpt") + "; "));
  EXPECT_NE(error.find("has content hash " + protocol::content_hash("y") + ", the trainer wrote " +
                       x + ": replaced after it was written"),
            std::string::npos)
      << error;
  EXPECT_NE(failure("read stage; echo '{\"checkpoint\": 4, \"checksum\": \"zz\"}'")
                .find("checksum: a content hash has 64 hex digits"),
            std::string::npos);
}

// The Python helper's hash of what it wrote (hashlib's BLAKE2b-256) is the worker's (libsodium's):
// its checkpoints are accepted, and the stage that reads one back gets the checksum to compare.
TEST_F(ExternalTrainers, ThePythonHelpersHashesAreTheWorkers) {
  const std::string script = std::string("import pickle, sys\nsys.path.insert(0, '") +
                             HIPPO_PYTHON +
                             "')\n"
                             "import hippo\n"
                             "def train(stage):\n"
                             "    model = {'n': 0}\n"
                             "    stage.restore(lambda f: model.update(pickle.load(f)))\n"
                             "    for step in stage.steps(evaluate=lambda: {'n': model['n']},\n"
                             "                            save=lambda f: pickle.dump(model, f)):\n"
                             "        model['n'] += 1\n"
                             "hippo.serve(train)\n";
  protocol::Job first = job("");
  first.run.model["command"] = {"/usr/bin/python3", "-c", script};
  first.from = 0;
  first.parent_state = -1;
  first.parent_file.clear();
  Seen seen;
  ASSERT_TRUE(run_once(first, hooks(seen)));
  ASSERT_EQ(seen.written.size(), 2u);
  protocol::Job second = first;
  second.from = 4;
  second.to = 6;
  second.eval_steps = {6};
  second.snapshots = {};
  second.parent_state = 11;
  second.parent_file = "a.ckpt";
  second.parent_checksum = seen.written[0].content_hash;
  ASSERT_TRUE(run_once(second, hooks(seen)));
  EXPECT_EQ(seen.metrics.back(), (std::pair<int64_t, json>{6, {{"n", 6}}}));
}

// Issue 43, item 5: a trainer's stderr reached the worker's terminal raw (a clear screen, a title,
// a line that passes for the worker's own log). It comes line by line, escaped, each line naming
// the trainer; so does the tail that an error quotes.
TEST_F(ExternalTrainers, ItsStderrIsEscapedAndNamedLineByLine) {
  const std::string log = in_dir("worker.log");
  const int saved = ::dup(2);
  const int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(file, 0);
  ::dup2(file, 2);
  ::close(file);
  const std::string error = failure(
      "printf '\\033[2Jclear\\n\\033]0;title\\007\\n[2099-01-01 00:00:00.000] [worker] [info] "
      "study x: done (forged)\\n' >&2; exit 3");
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("] \\x1b[2Jclear"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("] \\x1b]0;title\\x07"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("] [2099-01-01 00:00:00.000] [worker]"), std::string::npos) << lines[2];
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("[trainer ", 0), 0u) << line;
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  }
  EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;
  EXPECT_NE(error.find("its stderr ends with: \\x1b[2Jclear"), std::string::npos) << error;
}

// Issue 43, item 7: trainers started ahead (prepare) were kept for ever: after a 1-trial study,
// trainers that never trained stayed alive (on a GPU, memory held for nothing). A kept trainer that
// trains nothing for the bound is ended; before it, it is kept.
TEST_F(ExternalTrainers, AnIdleKeptTrainerIsEnded) {
  protocol::Job stage = job("while read -r stage; do :; done");
  stage.run.model["long_lived"] = true;
  ExternalTrainer trainer;
  ASSERT_TRUE(trainer.prepare(stage.run));
  const pid_t pid = trainer.kept_pid();
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(trainer.stop_if_idle(30));
  EXPECT_EQ(trainer.kept_pid(), pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(trainer.stop_if_idle(0.05));
  EXPECT_EQ(trainer.kept_pid(), -1);
  EXPECT_NE(::kill(pid, 0), 0);  // killed and reaped
  EXPECT_FALSE(trainer.stop_if_idle(0.05));
}

}  // namespace
}  // namespace hippo::worker
