// End to end: the real `hippo preview` binary on the real example specs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

Outcome hippo(const std::string& args) {
  std::string command = std::string(HIPPO_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {};
  Outcome run;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) run.output.append(buf, n);
  int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - start);
}

const std::string kExamples = HIPPO_SOURCE_DIR "/examples/";

TEST(Preview, ExampleCountsAreExact) {
  // No search plan at --db: nothing kept by earlier studies to reuse (tests/e2e/retention_test.cc
  // previews against one).
  Outcome run = hippo("--db /nonexistent/plan.db preview --format json " + kExamples +
                      "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(run.status, 0) << run.output;
  nlohmann::json out = nlohmann::json::parse(last_line(run.output));
  EXPECT_EQ(out, nlohmann::json({{"study", "fmnist-mlp-lr-decay"},
                                 {"trials", 18},
                                 {"steps_trial_based", 33696},
                                 {"steps_unique", 21060},
                                 {"steps_reused", 0},
                                 {"critical_path_steps", 1872}}));
}

TEST(Preview, TableAndCsv) {
  Outcome table = hippo("preview " + kExamples + "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("18 trials:"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("[468, 1872) lr=0.01 weight_decay=0.0005  <- trial 0"),
            std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("trial-based 33696, unique 21060"), std::string::npos);

  Outcome csv = hippo("--format csv preview " + kExamples + "fmnist-mlp-lr-decay.json");
  ASSERT_EQ(csv.status, 0) << csv.output;
  EXPECT_EQ(csv.output.substr(0, csv.output.find('\n')),
            "trial,length,lr.init,lr.milestones[0],lr.gamma");
  EXPECT_NE(csv.output.find("\n7,1872,0.05,3,0.1\n"), std::string::npos) << csv.output;
  EXPECT_EQ(std::count(csv.output.begin(), csv.output.end(), '\n'), 19);
}

TEST(Preview, EveryExampleIsAccepted) {
  for (const char* name :
       {"fmnist-mlp-lr-decay.json", "fmnist-mlp-random.json", "fmnist-mlp-ci.json"}) {
    Outcome run = hippo("preview --format json " + kExamples + name);
    EXPECT_EQ(run.status, 0) << name << ": " << run.output;
  }
}

TEST(Preview, BadInputExitsTwoWithThePath) {
  Outcome bad =
      hippo("preview " HIPPO_SOURCE_DIR "/tests/searchers/bad_specs/25-gamma-string.json");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.output,
            "error: hyperparameters.lr.gamma: expected a number or a distribution, got \"x\"\n");
  Outcome missing = hippo("preview /nonexistent/study.json");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("/nonexistent/study.json"), std::string::npos) << missing.output;
}

}  // namespace
