// The `hippo` command line as a user meets it, against the real binaries: preview's trial numbers
// against a real study's, `resume` without a plan.
#include <map>
#include <sstream>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Cli : public E2ETest {
 protected:
  // A plan with the CI example run to its end (4 trials), as `studies` and the others read it.
  void run_ci_study(const std::string& db) {
    ASSERT_EQ(
        sh(hippo(db) + "run " + kExamples + "/fmnist-mlp-ci.json --workers 2 >/dev/null").status,
        0);
  }
};

// A CSV text as {trial number -> {column -> value}} (the values hold no commas here), keeping
// only `columns`.
std::map<std::string, std::map<std::string, std::string>> csv_by_trial(
    const std::string& text, const std::vector<std::string>& columns) {
  std::istringstream in(text);
  std::vector<std::string> header;
  std::map<std::string, std::map<std::string, std::string>> out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string f; std::getline(cells, f, ',');) fields.push_back(f);
    if (header.empty()) {
      header = fields;
      continue;
    }
    for (size_t i = 0; i < fields.size() && i < header.size(); ++i)
      if (std::find(columns.begin(), columns.end(), header[i]) != columns.end())
        out[fields[0]][header[i]] = fields[i];
  }
  return out;
}

// preview numbers trials as the study will: its trial 1 is `hippo trials`' trial 1.
TEST_F(Cli, PreviewNumbersTrialsAsTheStudyWill) {
  const std::string ci = kExamples + "/fmnist-mlp-ci.json";
  Result preview = sh(hippo("plan.db") + "--format csv preview " + ci);
  ASSERT_EQ(preview.status, 0);
  run_ci_study("plan.db");
  Result trials = sh(hippo("plan.db") + "--format csv trials fmnist-mlp-ci");
  ASSERT_EQ(trials.status, 0);
  const std::vector<std::string> columns = {"length", "lr.init", "lr.every"};
  auto foreseen = csv_by_trial(preview.out, columns);
  EXPECT_EQ(foreseen.size(), 4u) << preview.out;
  EXPECT_EQ(foreseen.begin()->first, "1") << preview.out;
  EXPECT_EQ(foreseen, csv_by_trial(trials.out, columns)) << preview.out << trials.out;
}

// `resume` without --master resumes from the plan at --db: where there is none, it says so and
// makes none.
TEST_F(Cli, ResumeWithoutAPlanRefusesAndMakesNone) {
  Result r = sh(hippo("none.db") + "resume fmnist-mlp-ci 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("no search plan at " + path("none.db")), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("none.db")));
  EXPECT_FALSE(fs::exists(path("none.db.checkpoints")));
}

}  // namespace
}  // namespace hippo::e2e
