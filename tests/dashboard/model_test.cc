// The dashboard's model and figures without a browser or a socket: a plan written through the
// plan API (a real SQLite file), read back with read_plan, and the SVG drawn from it.
#include "dashboard/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "dashboard/figures.h"
#include "dashboard/pages.h"

namespace hippo::dashboard {
namespace {

namespace fs = std::filesystem;

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hippo-dashboard-model-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = (dir_ / "plan.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Three trials of one root key: 0 and 1 share [0, 10) and diverge there, 2 is alone.
  // Trial 0 is done (trained to 20), trial 1 was stopped at 15 (asked for 30), trial 2 runs
  // (asked for 20, trained to 5).
  int64_t write_study(SearchPlan& plan, const std::string& name) {
    StageTree tree;
    int64_t study = plan.create_study(name, {{"searcher", {{"metric", "loss"}, {"mode", "min"}}}},
                                      Policy::kShared);
    struct T {
      TrialId id;
      Sequence lr;
      int64_t length;
      TrialStatus status;
    };
    const T trials[] = {
        {0, piecewise({{0, 0.1}, {10, 0.01}}), 20, TrialStatus::kDone},
        {1, piecewise({{0, 0.1}, {10, 0.05}}), 30, TrialStatus::kStopped},
        {2, Sequence::constant(0.3), 20, TrialStatus::kRunning},
    };
    for (const T& t : trials) {
      TrialRow row;
      row.id = t.id;
      row.study_id = study;
      row.root_key = "r";
      row.params = {{"lr", t.lr.value_at(0)}, {"name", t.id == 2 ? "<b>x</b>" : "y"}};
      row.hyperparams = {{"lr", t.lr}};
      row.length = t.length;
      row.status = t.status;
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(t.id, "r", row.hyperparams, t.length));
    }
    auto train = [&](TrialId trial, int64_t step) {
      StageId s = tree.stage_at(trial, step);
      tree.mark_trained(s, step);
      plan.save_stage(tree.stage(s));
    };
    train(0, 10);
    train(0, 20);
    train(1, 15);
    train(2, 5);
    for (auto [trial, step, value] : std::vector<std::tuple<TrialId, int64_t, double>>{
             {0, 10, 0.9}, {1, 10, 0.9}, {0, 20, 0.5}, {1, 15, 0.7}, {2, 5, 1.2}})
      plan.add_metric({trial, step, "loss", value});
    plan.add_checkpoint({0, tree.stage_at(1, 10), 10, "a.ckpt", 1, "", 0});
    plan.add_execution({0,
                        tree.stage_at(0, 1),
                        0,
                        ExecutionKind::kTrain,
                        0,
                        20,
                        20,
                        "w",
                        10,
                        12,
                        ExecutionOutcome::kDone,
                        "",
                        {study}});
    plan.add_execution({0,
                        tree.stage_at(1, 11),
                        1,
                        ExecutionKind::kTrain,
                        10,
                        30,
                        15,
                        "w",
                        12,
                        13,
                        ExecutionOutcome::kAbandoned,
                        "",
                        {study}});
    return study;
  }

  fs::path dir_;
  std::string file_;
};

TEST_F(ModelTest, StepsStatesAndBestAsTheMasterCountsThem) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "s");
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  ASSERT_EQ(view.studies.size(), 1u);
  const StudyView& s = *view.find("s");
  EXPECT_EQ(view.find("1").get(), &s);
  EXPECT_EQ(view.find("nope"), nullptr);
  EXPECT_EQ(s.metric, "loss");
  EXPECT_FALSE(s.maximize);
  // Trial-based: 20 + 15 (stopped where it had been trained to) + 20. Unique: [0, 10) shared,
  // [10, 20) and [10, 15) own parts, [0, 20) alone.
  EXPECT_EQ(s.steps_trial_based, 55);
  EXPECT_EQ(s.steps_unique, 45);
  EXPECT_EQ(s.steps_trained, 10 + 10 + 5 + 5);
  EXPECT_EQ(s.steps_executed, 20 + 5);
  EXPECT_EQ(s.critical_path_steps, 20);
  EXPECT_NEAR(s.saving(), 55.0 / 45.0, 1e-12);
  EXPECT_EQ(s.trials_closed, 2);
  ASSERT_TRUE(s.best);
  EXPECT_EQ(s.best->trial, 1);  // trial 0 (number 1) reached 0.5
  EXPECT_DOUBLE_EQ(s.best->value, 0.5);
  EXPECT_EQ(s.trials[1].curve.size(), 2u);
  EXPECT_EQ(s.trials[1].needed, 15);
  // States: the shared stage and trial 0's part trained; trial 1's part trained as far as it is
  // needed (the rest pruned: drawn, not needed); trial 2's stage training.
  ASSERT_EQ(s.stages.size(), 4u);
  std::map<std::string, int> states;
  for (const StageView& st : s.stages) ++states[to_string(st.state)];
  EXPECT_EQ(states["trained"], 3);
  EXPECT_EQ(states["training"], 1);
  std::set<StageId> seen;
  for (const StageView& st : s.stages) {
    if (st.stage.parent != kNoStage) {
      EXPECT_TRUE(seen.count(st.stage.parent)) << "a child before its parent";
    }
    seen.insert(st.stage.id);
    if (st.stage.start == 0 && st.stage.end == 10) {
      EXPECT_EQ(st.checkpoints, std::vector<int64_t>{10});
      EXPECT_EQ(st.trials_through, 2);
    }
  }
  ASSERT_EQ(s.executions.size(), 2u);
}

TEST_F(ModelTest, FiguresDrawWhatThePlanHoldsAndEscapeItsText) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "<script>alert('x')</script>");
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.studies[0];
  EXPECT_EQ(occurrences(curves_svg(s), "class=\"curve\""), 3u);
  EXPECT_EQ(occurrences(tree_svg(s), "class=\"stage"), s.stages.size());
  EXPECT_EQ(occurrences(tree_svg(s), "class=\"pruned-part\""), 1u);  // trial 1's [15, 30)
  EXPECT_EQ(occurrences(timeline_svg(s), "class=\"execution"), 2u);
  EXPECT_EQ(slice_svgs(s).size(), 2u);  // lr, and the categorical "name"
  for (const Page& page : {study_page(s), tree_page(s), timeline_page(s), studies_page(view)}) {
    EXPECT_EQ(page.content.find("<script>alert"), std::string::npos);
    EXPECT_EQ(page.content.find("<b>x</b>"), std::string::npos);
  }
  // The report: one file, nothing it would load from elsewhere.
  std::string html = report(s);
  EXPECT_EQ(occurrences(html, "<script>"), 1u);  // the inlined dashboard.js only
  for (const char* outside : {"src=\"http", "src=\"//", "href=\"http", "href=\"//", "url("})
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  EXPECT_NE(html.find("connect-src 'none'"), std::string::npos);
  EXPECT_EQ(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

}  // namespace
}  // namespace hippo::dashboard
