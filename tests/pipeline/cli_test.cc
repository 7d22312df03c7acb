// `hippo pipeline-plan` as a user runs it: the real binary, its output and its exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

Result hippo(const std::string& args) {
  Result result;
  FILE* pipe = popen((std::string(HIPPO_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    result.output.append(buffer, n);
  int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(PipelinePlanCli, JsonHasTheBubbleThePeakStashAndTheSteps) {
  Result r = hippo("--format json pipeline-plan --stages 4 --microbatches 8 --schedule 1f1b");
  ASSERT_EQ(r.status, 0) << r.output;
  nlohmann::json plan = nlohmann::json::parse(r.output);
  EXPECT_NEAR(plan["bubble_fraction"].get<double>(), 3.0 / 11.0, 1e-12);
  EXPECT_EQ(plan["peak_stash"], nlohmann::json::parse("[4, 3, 2, 1]"));
  EXPECT_EQ(plan["makespan"].get<double>(), 33);
  ASSERT_EQ(plan["steps"].size(), 4u);
  // Stage 3 (the last) alternates forward and backward from its first micro-batch.
  EXPECT_EQ(plan["steps"][3][0]["op"], "receive activation");
  EXPECT_EQ(plan["steps"][3][1]["op"], "forward");
  EXPECT_EQ(plan["steps"][3][2]["op"], "backward");
  EXPECT_EQ(plan["steps"][3][2]["start"].get<double>(), 4);

  r = hippo("--format json pipeline-plan --stages 8 --microbatches 16 --schedule bpipe");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json bpipe = nlohmann::json::parse(r.output);
  for (const auto& peak : bpipe["peak_stash"]) EXPECT_LE(peak.get<int>(), 5);
}

TEST(PipelinePlanCli, TablePrintsOneTimelinePerStage) {
  Result r = hippo("pipeline-plan --stages 2 --microbatches 3 --schedule gpipe");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("makespan 12, bubble 25.0%"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0      abc...AABBCC  9     3     3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1      .abcAABBCC..  9     3     3"), std::string::npos) << r.output;
}

// A heavy output layer (8 stage forwards) on the last stage against a quarter of it on each of
// 4 stages: the vocabulary-parallel plan's stages are evenly busy. (Its makespan is no measure of
// the paper's schedules: each micro-batch's output passes are a barrier of all stages here.)
TEST(PipelinePlanCli, VocabParallelSpreadsAHeavyOutputLayerOverTheStages) {
  const std::string plan = "--format json pipeline-plan --stages 4 --microbatches 8 --vocab-cost 8";
  Result r = hippo(plan + " --schedule 1f1b");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json last = nlohmann::json::parse(r.output);
  EXPECT_EQ(last["vocab_parallel"], false);
  EXPECT_EQ(last["busy"][3].get<double>(), 8 * (3 + 24));
  r = hippo(plan + " --schedule 1f1b --vocab-parallel");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json parallel = nlohmann::json::parse(r.output);
  EXPECT_EQ(parallel["vocab_parallel"], true);
  for (const auto& busy : parallel["busy"]) EXPECT_EQ(busy.get<double>(), 8 * (3 + 6));
  EXPECT_GE(parallel["makespan"].get<double>(), 8 * (3 + 6));
  r = hippo(
      "pipeline-plan --stages 2 --microbatches 2 --schedule 1f1b --vocab-cost 2 "
      "--vocab-parallel");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("*: vocabulary pass"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a p-th of it in each stage's vocabulary passes"), std::string::npos);
}

TEST(PipelinePlanCli, BadArgumentsExitTwoWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"--stages 0 --microbatches 4 --schedule 1f1b", "error: --stages: expected an integer"},
      {"--stages 2 --microbatches 0 --schedule 1f1b", "error: --microbatches: expected an integer"},
      {"--stages 4 --microbatches 6 --schedule interleaved --chunks 2",
       "error: --microbatches: interleaved needs a multiple of stages (4), got 6"},
      {"--stages 2 --microbatches 4 --schedule zigzag", "error: --schedule: unknown schedule"},
      {"--stages 2 --microbatches 4 --schedule 1f1b --chunks 2",
       "error: --chunks: only the interleaved schedule has chunks"},
      {"--stages 2 --microbatches 4 --schedule bpipe --backward-cost 0",
       "error: --backward-cost: expected a positive finite time, got 0"},
      {"--stages 2 --microbatches 4 --schedule gpipe --vocab-parallel",
       "error: --vocab-parallel: needs at least 2 stages and the 1f1b or interleaved schedule"},
      {"--stages 2 --microbatches 4 --schedule 1f1b --vocab-cost -1",
       "error: --vocab-cost: expected a finite time, got -1"},
      {"--stages 2 --microbatches 4 --schedule 1f1b --measure", "error: --measure: needs --model"},
      {"--stages 2 --microbatches 4 --schedule 1f1b --model '{\"type\": \"mlp\"}'",
       "error: --model: expected a gpt model spec"},
      {"--stages 2 --microbatches 4 --schedule 1f1b --model '{\"type\": \"gpt\", \"heads\": 3}'",
       "error: --model.layers: missing"},
  };
  for (const auto& [args, error] : cases) {
    Result r = hippo(std::string("pipeline-plan ") + args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.output.rfind(error, 0), 0u) << args << ": " << r.output;
  }
}

// Each stage's compute and memory for a model (stage_balance.h counts them; its test checks the
// numbers): the bpe32k-sized gpt's output layer outweighs its 4 transformer blocks, so the plain
// cut leaves the last stage the head alone, and vocabulary parallelism evens out the compute.
TEST(PipelinePlanCli, ModelPrintsEachStagesComputeAndMemory) {
  Result r = hippo(
      "pipeline-plan --stages 2 --microbatches 4 --schedule 1f1b --sequences 4 --model "
      "'{\"type\": \"gpt\", \"layers\": 4, \"heads\": 4, \"dim\": 128, \"context\": 64, "
      "\"vocab\": 32768}'");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line :
       {"1f1b, 2 stages:", "0         embedding, transformer 0-3  0.210         19.1",
        "1         head                        1.074         16.0",
        "1f1b, 2 stages, vocab_parallel:", "0         transformer 0-1, vocabulary 0-3  0.642",
        "max/mean                                   1.00          1.00", "bpipe, 2 stages:"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

// `hippo preview` of a pipelined spec ends with the balance of its first trial's model.
TEST(PreviewCli, PipelinedSpecShowsTheStagesBalance) {
  Result r =
      hippo(std::string("preview ") + HIPPO_SOURCE_DIR + "/examples/gpt-fortunes-pipeline.json");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line :
       {"(trial 1's model, batch size 16 in 4 micro-batches)",
        "micro-batches of 4 sequences; adamw (2 optimizer values per parameter)",
        "1f1b, 2 stages:", "1f1b, 2 stages, vocab_parallel: not possible (pipeline.vocab_parallel",
        "bpipe, 2 stages:"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

// --measure times a small gpt's passes on this CPU and simulates with them: the predicted
// samples/s, and the vocabulary-parallel pipeline's beside it (its vocabulary of 2 blocks fits 2
// stages).
TEST(PipelinePlanCli, MeasurePredictsSamplesPerSecondFromMeasuredTimes) {
  const std::string model =
      "--model '{\"type\": \"gpt\", \"layers\": 2, \"heads\": 2, \"dim\": 16, \"context\": 8, "
      "\"vocab\": 8192}'";
  Result r = hippo("pipeline-plan --stages 2 --microbatches 4 --schedule 1f1b --measure " + model);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("as measured on this CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples/s (4 micro-batches of 1 sequences, then the update); with "
                          "vocab_parallel: "),
            std::string::npos)
      << r.output;
  r = hippo("--format json pipeline-plan --stages 2 --microbatches 4 --schedule 1f1b --measure " +
            model);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(nlohmann::json::parse(r.output)["predicted_samples_per_s"].get<double>(), 0);
}

}  // namespace
