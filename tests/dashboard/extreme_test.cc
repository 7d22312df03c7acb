// Figures that survive any value (issue 43): metrics and parameters at the ends of a double
// (1e308 beside -1e308, DBL_MAX beside 0.5, denormals), one trial, all values equal, NaN and
// infinities. Every page and the report are drawn in bounded time and size, every coordinate is a
// finite number, and the values that are not finite are left out with a note.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>

#include "dashboard/figures.h"
#include "dashboard/model.h"
#include "dashboard/pages.h"
#include "dashboard/scale.h"

namespace hippo::dashboard {
namespace {

namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every number in a coordinate attribute or a path: none is NaN or infinite.
void expect_finite_coordinates(const std::string& svg, const std::string& what) {
  static const std::regex attribute(
      R"( (?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|d|points)="([^"]*)\")");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), attribute);
       it != std::sregex_iterator(); ++it) {
    const std::string value = (*it)[1];
    ASSERT_EQ(value.find("nan"), std::string::npos) << what << ": " << it->str();
    ASSERT_EQ(value.find("inf"), std::string::npos) << what << ": " << it->str();
  }
}

class ExtremeValues : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hippo-dashboard-extreme-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = (dir_ / "plan.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A study whose trial i reports values[i] (each objective's metric o0, o1, ... the same value,
  // the second negated) at steps 10 and 20, with parameter x = params[i].
  void write(const std::string& name, size_t objectives, const std::vector<double>& values,
             const std::vector<double>& params) {
    SearchPlan plan = SearchPlan::open(file_);
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < objectives; ++i)
      list.push_back({{"metric", "o" + std::to_string(i)}, {"mode", i == 0 ? "max" : "min"}});
    const nlohmann::json spec = {{"model", {{"type", "external"}, {"command", {"train"}}}},
                                 {"searcher", {{"name", "random"}, {"objectives", list}}}};
    const int64_t study = plan.create_study(name, spec, Policy::kShared);
    StageTree tree = plan.load_tree();
    const TrialId first = plan.next_trial_id();
    for (size_t i = 0; i < values.size(); ++i) {
      TrialRow row;
      row.id = first + static_cast<TrialId>(i);
      row.study_id = study;
      row.root_key = name;
      row.params = {{"x", params[i % params.size()]}};
      row.hyperparams = {{"x", Sequence::constant(static_cast<double>(i))}};
      row.length = 20;
      row.status = TrialStatus::kDone;
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(row.id, name, row.hyperparams, row.length));
      for (int64_t step : {10, 20})
        for (size_t o = 0; o < objectives; ++o)
          plan.add_metric({row.id, step, "o" + std::to_string(o),
                           o == 1 ? -values[i] : values[i] / static_cast<double>(step / 10)});
      plan.add_execution({0,
                          tree.stage_at(row.id, 1),
                          row.id,
                          ExecutionKind::kTrain,
                          0,
                          20,
                          20,
                          "w",
                          1e9,
                          1e9 + 1,
                          ExecutionOutcome::kDone,
                          "",
                          {study}});
    }
  }

  // Draws every page of every study and the report, with a watchdog: a figure that loops without
  // end kills the test (SIGALRM) instead of hanging it.
  void draw_everything() {
    SearchPlan reader = SearchPlan::open_read_only(file_);
    PlanView view = read_plan(reader, 2e9);
    alarm(60);
    const std::string studies = studies_page(view).content;
    EXPECT_LT(studies.size(), 1u << 20);
    for (const auto& s : view.studies) {
      for (const Page& page : {study_page(*s), tree_page(*s), timeline_page(*s)}) {
        EXPECT_LT(page.content.size(), 1u << 20) << s->row.name << ": " << page.title;
        expect_finite_coordinates(page.content, s->row.name + ": " + page.title);
      }
      const std::string html = report(*s);
      EXPECT_LT(html.size(), 1u << 21) << s->row.name;
      expect_finite_coordinates(html, s->row.name + ": report");
    }
    alarm(0);
  }

  fs::path dir_;
  std::string file_;
};

TEST_F(ExtremeValues, TheEndsOfADoubleAreDrawnInBoundedSpace) {
  const double tiny = std::numeric_limits<double>::denorm_min();
  write("huge", 1, {1e308, -1e308, 0.5}, {1e308, -1e308, 0});
  write("max", 1, {DBL_MAX, 0.5, DBL_MAX}, {DBL_MAX, 0.5});
  write("lowest", 1, {-DBL_MAX, DBL_MAX}, {0.5});
  write("denormal", 1, {tiny, 3 * tiny, 0}, {tiny, 2 * tiny});
  write("equal", 1, {0.25, 0.25, 0.25, 0.25}, {1e-300});
  write("equal-max", 1, {DBL_MAX, DBL_MAX}, {DBL_MAX});
  write("one", 1, {1e-310}, {-DBL_MAX});
  write("two-huge", 2, {1e308, -1e308, 0.5, DBL_MAX}, {1e308, 0});
  write("two-denormal", 2, {tiny, 2 * tiny, 0}, {tiny});
  draw_everything();
}

TEST_F(ExtremeValues, ValuesThatAreNotFiniteAreLeftOutWithANote) {
  write("nan", 1, {0.5, kNaN, kInf, -kInf, 0.25}, {1, 2});
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 2e9);
  const StudyView& s = *view.find("nan");
  EXPECT_EQ(s.not_finite, 6);  // three trials, two steps each
  const std::string page = study_page(s).content;
  EXPECT_NE(page.find("6 evaluations of o0 were NaN or infinite and are not drawn"),
            std::string::npos);
  expect_finite_coordinates(page, "nan");
}

TEST(Ticks, AreFewRoundFiniteAndInsideAnyRange) {
  const double tiny = std::numeric_limits<double>::denorm_min();
  const std::pair<double, double> ranges[] = {
      {0, 1},           {0.5, DBL_MAX},   {-DBL_MAX, DBL_MAX}, {-1e308, 1e308},
      {tiny, 5 * tiny}, {1e308, 1e308},   {DBL_MAX, DBL_MAX},  {1, 1 + 1e-15},
      {-0.0, 0.0},      {1e16, 1e16 + 4}, {tiny, DBL_MAX}};
  for (const auto& [lo, hi] : ranges)
    for (bool log : {false, true}) {
      const Scale s = fit(lo, hi, 0, 100, log);
      ASSERT_TRUE(std::isfinite(s.lo) && std::isfinite(s.hi)) << lo << " " << hi;
      const std::vector<double> t = ticks(s, 5);
      ASSERT_FALSE(t.empty()) << lo << " " << hi;
      EXPECT_LE(t.size(), 22u) << lo << " " << hi;
      for (size_t i = 0; i < t.size(); ++i) {
        EXPECT_TRUE(std::isfinite(t[i]));
        if (i > 0) {
          EXPECT_GT(t[i], t[i - 1]);
        }
        const double px = s(t[i]);
        EXPECT_TRUE(px >= -1 && px <= 101) << lo << " " << hi << ": " << t[i] << " at " << px;
      }
      EXPECT_DOUBLE_EQ(s(s.lo), 0);
      EXPECT_DOUBLE_EQ(s(s.hi), 100);
    }
  const std::vector<double> round = ticks(fit(0, 1, 0, 100), 5);
  ASSERT_EQ(round.size(), 6u);
  for (size_t i = 0; i < round.size(); ++i)
    EXPECT_NEAR(round[i], 0.2 * static_cast<double>(i), 1e-12);
  EXPECT_DOUBLE_EQ(fit(0, 1, 0, 100).fraction(kNaN), 0);
}

}  // namespace
}  // namespace hippo::dashboard
