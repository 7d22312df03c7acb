// The dashboard's model and figures without a browser or a socket: a plan written through the
// plan API (a real SQLite file), read back with read_plan, and the SVG drawn from it.
#include "dashboard/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <regex>
#include <set>

#include "dashboard/figures.h"
#include "dashboard/pages.h"
#include "searchers/pareto.h"
#include "tests/dashboard/large_plan.h"

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

// A study of `objectives` (metrics o0, o1, ...: o0 maximized, the others minimized; an external
// model, so no name is special) under the constraint "limit <= 0.5", and its trials' values as
// the test wrote them, to find the front without the code under test.
class GoalsTest : public ModelTest {
 protected:
  struct Written {
    std::optional<std::vector<double>> values;  // at the last evaluation that has every metric
    double limit = 0;                           // the constraint's metric there
    bool diverged = false;
    bool feasible() const { return values && !diverged && limit <= 0.5; }
  };

  // n trials evaluated at steps 10 and 20 on a coarse grid of values (ties and duplicates), some
  // trials' last evaluation missing a metric (their result is at step 10), some never reporting
  // every metric, some diverged, some failed.
  std::vector<Written> write_goal_study(SearchPlan& plan, const std::string& name,
                                        size_t objectives, int64_t n) {
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < objectives; ++i)
      list.push_back({{"metric", "o" + std::to_string(i)}, {"mode", i == 0 ? "max" : "min"}});
    const nlohmann::json spec = {{"model", {{"type", "external"}, {"command", {"train"}}}},
                                 {"searcher",
                                  {{"name", "random"},
                                   {"objectives", list},
                                   {"constraints", {{{"metric", "limit"}, {"max", 0.5}}}}}}};
    const int64_t study = plan.create_study(name, spec, Policy::kShared);
    StageTree tree;
    std::vector<Written> written;
    uint64_t state = 12345;
    auto draw = [&] {  // a value on a grid of 21, for ties
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>((state >> 33) % 21) / 20;
    };
    plan.transaction([&] {
      for (int64_t number = 1; number <= n; ++number) {
        TrialRow row;
        row.id = 1000 + number;
        row.study_id = study;
        row.root_key = "r";
        row.params = {{"x", static_cast<double>(number)}};
        row.hyperparams = {{"x", Sequence::constant(static_cast<double>(number))}};
        row.length = 20;
        row.status = number % 13 == 0   ? TrialStatus::kDiverged
                     : number % 17 == 0 ? TrialStatus::kFailed
                                        : TrialStatus::kDone;
        plan.add_trial(row);
        plan.save_change(tree, tree.add_trial(row.id, "r", row.hyperparams, row.length));
        Written w;
        w.diverged = row.status == TrialStatus::kDiverged;
        for (int64_t step : {10, 20}) {
          std::vector<double> values;
          for (size_t i = 0; i < objectives; ++i) values.push_back(draw());
          const double limit = draw();
          const bool partial = number % 11 == 0 || (step == 20 && number % 7 == 0);
          for (size_t i = 0; i < objectives; ++i)
            if (!partial || i != 1)
              plan.add_metric({row.id, step, "o" + std::to_string(i), values[i]});
          plan.add_metric({row.id, step, "limit", limit});
          if (!partial) {
            w.values = values;
            w.limit = limit;
          }
        }
        written.push_back(w);
      }
    });
    return written;
  }

  // The trials (numbers) no feasible trial dominates, by comparing every pair.
  static std::set<int64_t> brute_force_front(const std::vector<Written>& written) {
    std::set<int64_t> front;
    for (size_t i = 0; i < written.size(); ++i) {
      if (!written[i].feasible()) continue;
      bool dominated = false;
      for (size_t j = 0; j < written.size() && !dominated; ++j) {
        if (j == i || !written[j].feasible()) continue;
        bool no_worse = true, better = false;
        for (size_t k = 0; k < written[i].values->size(); ++k) {
          double a = (*written[j].values)[k], b = (*written[i].values)[k];
          if (k != 0) std::swap(a, b);  // minimized: smaller is better
          no_worse = no_worse && a >= b;
          better = better || a > b;
        }
        dominated = no_worse && better;
      }
      if (!dominated) front.insert(static_cast<int64_t>(i + 1));
    }
    return front;
  }

  // data-trial of the scatter's circles whose class list has `cls`.
  static std::set<int64_t> circles(const std::string& svg, const std::string& cls) {
    std::set<int64_t> out;
    static const std::regex circle("<circle class=\"(trial [a-z ]+)\" data-trial=\"([0-9]+)\"");
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle);
         it != std::sregex_iterator(); ++it) {
      std::string classes = " " + (*it)[1].str() + " ";
      if (classes.find(" " + cls + " ") != std::string::npos) out.insert(std::stoll((*it)[2]));
    }
    return out;
  }
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

// A reader that keeps the trials' parsed values between reads (the dashboard's server) sees
// what a fresh read sees, also after trials were added and the tree split under them.
TEST_F(ModelTest, AReReadThatKeepsParsedValuesEqualsAFreshRead) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "s");
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  ParsedTrialValues parsed;
  const PlanView before = read_plan(reader, 100, "", &parsed);
  EXPECT_EQ(parsed.params.size(), 3u);
  EXPECT_EQ(parsed.hyperparams.size(), 3u);
  {
    // Trial 3 diverges from trial 0 at step 5: the stage [0, 10) splits there.
    SearchPlan plan = SearchPlan::open(file_);
    StageTree tree = plan.load_tree();
    TrialRow row;
    row.id = 3;
    row.study_id = 1;
    row.root_key = "r";
    row.params = {{"lr", 0.1}, {"name", "new"}};
    row.hyperparams = {{"lr", piecewise({{0, 0.1}, {5, 0.2}})}};
    row.length = 12;
    row.status = TrialStatus::kRunning;
    plan.transaction([&] {
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(3, "r", row.hyperparams, row.length));
      plan.add_metric({3, 5, "loss", 0.1});
    });
  }
  const PlanView kept = read_plan(reader, 100, "", &parsed);
  const PlanView fresh = read_plan(reader, 100);
  EXPECT_EQ(parsed.params.size(), 4u);
  ASSERT_EQ(kept.studies.size(), 1u);
  const StudyView& k = *kept.studies[0];
  const StudyView& f = *fresh.studies[0];
  ASSERT_EQ(k.trials.size(), 4u);
  EXPECT_EQ(k.trials[3].row.params, f.trials[3].row.params);
  EXPECT_EQ(k.stages.size(), before.studies[0]->stages.size() + 2);  // the split and trial 3's own
  EXPECT_EQ(k.steps_unique, f.steps_unique);
  EXPECT_EQ(k.best->value, 0.1);
  EXPECT_EQ(study_page(k).content, study_page(f).content);
  EXPECT_EQ(tree_page(k).content, tree_page(f).content);
  EXPECT_EQ(timeline_page(k).content, timeline_page(f).content);
}

// Every page of `a` is the page of `b`.
void expect_same_pages(const PlanView& a, const PlanView& b, const std::string& when) {
  ASSERT_EQ(a.studies.size(), b.studies.size()) << when;
  EXPECT_EQ(studies_page(a).content, studies_page(b).content) << when;
  for (size_t i = 0; i < a.studies.size(); ++i) {
    const StudyView &x = *a.studies[i], &y = *b.studies[i];
    EXPECT_EQ(study_page(x).content, study_page(y).content) << when << ", study " << x.row.id;
    EXPECT_EQ(tree_page(x).content, tree_page(y).content) << when << ", study " << x.row.id;
    EXPECT_EQ(timeline_page(x).content, timeline_page(y).content) << when;
    EXPECT_EQ(x.steps_unique, y.steps_unique) << when;
    EXPECT_EQ(x.steps_trained, y.steps_trained) << when;
  }
}

// The dashboard's server reads only what changed since its last read (the plan's change marks):
// the rows of the trials and stages written since, and the views of the studies they touch; what
// it shows then is what a fresh read of the whole plan shows, page for page, after every kind of
// write: a metric, a trial that splits a stage, training progress, a checkpoint, an execution, a
// status, a longer trial, a study of its own, a metric and a checkpoint deleted, a deleted study.
TEST_F(ModelTest, APlanReaderReadsOnlyWhatChangedAndEqualsAFreshRead) {
  int64_t other = 0;
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "s");
    other = plan.create_study("other", {{"searcher", {{"metric", "loss"}, {"mode", "min"}}}},
                              Policy::kShared);
  }
  // Writes through the plan API with the master's tree, in one transaction.
  auto write = [&](const std::function<void(SearchPlan&, StageTree&)>& fn) {
    SearchPlan plan = SearchPlan::open(file_);
    StageTree tree = plan.load_tree();
    plan.transaction([&] { fn(plan, tree); });
  };
  auto add_trial = [](SearchPlan& plan, StageTree& tree, TrialId id, int64_t study,
                      const std::string& root, Sequence lr, int64_t length) {
    TrialRow row;
    row.id = id;
    row.study_id = study;
    row.root_key = root;
    row.params = {{"lr", lr.value_at(0)}, {"name", "t" + std::to_string(id)}};
    row.hyperparams = {{"lr", lr}};
    row.length = length;
    row.status = TrialStatus::kRunning;
    plan.add_trial(row);
    plan.save_change(tree, tree.add_trial(id, root, row.hyperparams, length));
  };
  write([&](SearchPlan& plan, StageTree& tree) {
    add_trial(plan, tree, 3, other, "q", Sequence::constant(0.2), 10);
    plan.add_metric({3, 5, "loss", 0.4});
  });

  SearchPlan reader = SearchPlan::open_read_only(file_);
  ASSERT_TRUE(reader.has_change_marks());
  PlanReader kept;
  PlanView last = kept.read(reader, 100);
  EXPECT_EQ(kept.last_work().trials_read, 4u);  // the first read is of everything
  EXPECT_EQ(kept.last_work().studies_computed, 2u);
  expect_same_pages(last, read_plan(reader, 100), "first read");

  // Reads after each write: the studies not touched keep their views, the rows read are the
  // changed ones, and the pages are those of a fresh read.
  auto reread = [&](const std::string& when, size_t trials_read,
                    const std::set<int64_t>& computed) {
    PlanView next = kept.read(reader, 100);
    EXPECT_EQ(kept.last_work().trials_read, trials_read) << when;
    EXPECT_EQ(kept.last_work().studies_computed, computed.size()) << when;
    for (const auto& s : next.studies) {
      const auto before = last.find(std::to_string(s->row.id));
      EXPECT_EQ(before == s, computed.count(s->row.id) == 0) << when << ": study " << s->row.id;
    }
    expect_same_pages(next, read_plan(reader, 100), when);
    last = std::move(next);
  };
  reread("nothing written", 0, {});
  write([](SearchPlan& plan, StageTree&) { plan.add_metric({0, 15, "loss", 0.05}); });
  reread("a metric", 1, {1});
  EXPECT_FALSE(kept.last_work().tree_restored);
  EXPECT_EQ(last.studies[0]->best->value, 0.05);
  // Trial 4 diverges from trial 0 at step 5: the stage [0, 10) splits there, under trials 0-2.
  write([&](SearchPlan& plan, StageTree& tree) {
    add_trial(plan, tree, 4, 1, "r", piecewise({{0, 0.1}, {5, 0.2}}), 12);
    plan.add_metric({4, 5, "loss", 0.3});
  });
  reread("a trial that splits a stage", 1, {1});
  EXPECT_FALSE(kept.last_work().tree_restored);
  write([](SearchPlan& plan, StageTree& tree) {
    const StageId s = tree.stage_at(2, 6);
    tree.mark_trained(s, 8);
    plan.save_stage(tree.stage(s));
    plan.add_checkpoint({0, s, 8, "b.ckpt", 1, "", 0});
  });
  reread("training progress and a checkpoint", 0, {1});
  EXPECT_FALSE(kept.last_work().tree_restored);
  write([](SearchPlan& plan, StageTree& tree) {
    plan.add_execution({0,
                        tree.stage_at(3, 1),
                        3,
                        ExecutionKind::kTrain,
                        0,
                        10,
                        10,
                        "w2",
                        20,
                        21,
                        ExecutionOutcome::kDone,
                        "",
                        {2}});
    plan.set_trial_status(3, TrialStatus::kDone);
  });
  reread("an execution and a trial's status", 1, {2});
  EXPECT_FALSE(kept.last_work().tree_restored);
  write([&](SearchPlan& plan, StageTree& tree) {
    plan.set_trial_length(2, 40);
    plan.save_change(tree, tree.extend_trial(2, 40));
    add_trial(plan, tree, 5, other, "q", Sequence::constant(0.7), 10);
    plan.set_study_status(1, StudyStatus::kDone);
  });
  reread("a longer trial, a new one and a status", 2, {1, 2});
  EXPECT_FALSE(kept.last_work().tree_restored);
  write([&](SearchPlan& plan, StageTree& tree) {  // another order than the reader's replay
    add_trial(plan, tree, 6, 1, "r", piecewise({{0, 0.1}, {10, 0.01}, {25, 0.5}}), 30);
    plan.set_trial_length(0, 35);
    plan.save_change(tree, tree.extend_trial(0, 35));
  });
  reread("a trial added before another extended", 2, {1});
  EXPECT_TRUE(kept.last_work().tree_restored);
  write([&](SearchPlan& plan, StageTree&) {  // a distrusted evaluation and state go
    plan.delete_metric(0, 15, "loss");
    int deleted = 0;
    for (const CheckpointRow& c : plan.checkpoints()) {
      if (c.file != "b.ckpt") continue;
      plan.delete_checkpoint(c.id);
      ++deleted;
    }
    EXPECT_EQ(deleted, 1);
  });
  reread("a metric and a checkpoint deleted", 1, {1});
  EXPECT_NE(last.studies[0]->best->value, 0.05);
  write([&](SearchPlan& plan, StageTree&) {
    plan.set_study_status(other, StudyStatus::kCancelled);
    plan.delete_study(other);
  });
  reread("a deleted study", 0, {});
  EXPECT_EQ(last.studies.size(), 1u);
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

TEST_F(GoalsTest, TheScatterMarksTheTrialsThatABruteForceFilterFinds) {
  std::vector<Written> written;
  {
    SearchPlan plan = SearchPlan::open(file_);
    written = write_goal_study(plan, "two", 2, 120);
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.studies[0];
  ASSERT_TRUE(s.goals.several());
  EXPECT_FALSE(s.best);  // several objectives: a front, no best
  const std::set<int64_t> front = brute_force_front(written);
  ASSERT_GE(front.size(), 2u);
  EXPECT_EQ(std::set<int64_t>(s.front.begin(), s.front.end()), front);

  const std::string svg = pareto_svg(s);
  EXPECT_EQ(circles(svg, "front"), front);
  std::set<int64_t> infeasible, drawn;
  for (size_t i = 0; i < written.size(); ++i) {
    const int64_t number = static_cast<int64_t>(i + 1);
    if (!written[i].values || written[i].diverged) continue;  // nothing to draw
    drawn.insert(number);
    if (!written[i].feasible()) infeasible.insert(number);
    // The result is the last evaluation that has every metric: step 10 when step 20 lacks one.
    ASSERT_TRUE(s.trial(number)->result) << number;
    EXPECT_EQ(s.trial(number)->result->values, *written[i].values) << number;
  }
  ASSERT_FALSE(infeasible.empty());
  EXPECT_EQ(circles(svg, "infeasible"), infeasible);
  EXPECT_EQ(circles(svg, "trial"), drawn);  // diverged and incomplete trials are not drawn
  EXPECT_EQ(occurrences(svg, "<title>"), drawn.size());
  std::set<int64_t> failed;  // write_goal_study fails every 17th trial
  for (int64_t number : drawn)
    if (number % 17 == 0) failed.insert(number);
  EXPECT_EQ(circles(svg, "failed"), failed);
  EXPECT_EQ(occurrences(svg, "class=\"front-line\""), 1u);

  // The hypervolume never falls, and ends at pareto.h's hypervolume of the final front.
  const HypervolumeHistory history = hypervolume_history(s);
  ASSERT_EQ(history.points.size(), s.trials.size());
  for (size_t i = 1; i < history.points.size(); ++i)
    EXPECT_GE(history.points[i].second, history.points[i - 1].second);
  std::vector<std::vector<double>> feasible, final_front;
  for (size_t i = 0; i < written.size(); ++i)
    if (written[i].feasible()) feasible.push_back(*written[i].values);
  for (int64_t number : front) final_front.push_back(*written[number - 1].values);
  const std::vector<double> reference = *hypervolume_reference(feasible, {true, false});
  EXPECT_EQ(history.reference, reference);
  const double final_volume = hypervolume(final_front, reference, {true, false});
  EXPECT_GT(final_volume, 0);
  EXPECT_DOUBLE_EQ(history.points.back().second, final_volume);
  // Midway, the volume of every feasible result so far (hypervolume weighs dominated points at
  // nothing): the front kept from sample to sample loses nothing.
  std::vector<std::vector<double>> so_far;
  for (size_t i = 0; i < 60; ++i)
    if (written[i].feasible()) so_far.push_back(*written[i].values);
  EXPECT_DOUBLE_EQ(history.points[59].second, hypervolume(so_far, reference, {true, false}));
  const std::string hv = hypervolume_svg(s);
  EXPECT_EQ(occurrences(hv, "class=\"hv\""), history.points.size());
  std::smatch last;
  ASSERT_TRUE(std::regex_search(
      hv, last, std::regex("data-hypervolume=\"([^\"]+)\"[^<]*<title>trials 1 to 120:")));
  EXPECT_DOUBLE_EQ(std::stod(last[1]), final_volume);

  // The page: the two figures in place of the history, a column per objective, feasible and
  // pareto in the table; the studies list counts the front.
  const std::string page = study_page(s).content;
  EXPECT_NE(page.find("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"pareto\""),
            std::string::npos);
  EXPECT_NE(page.find("class=\"hypervolume\""), std::string::npos);
  EXPECT_EQ(page.find("class=\"history\""), std::string::npos);
  EXPECT_NE(page.find("\"o0\",\"o1\",\"feasible\",\"pareto\""), std::string::npos);
  EXPECT_NE(studies_page(view).content.find(std::to_string(front.size()) + " on the front"),
            std::string::npos);
  EXPECT_NE(report(s).find("class=\"pareto\""), std::string::npos);
}

TEST_F(GoalsTest, HypervolumeIsSampledForManyTrialsAndSaidToBeMissingForFourObjectives) {
  std::vector<Written> three;
  {
    SearchPlan plan = SearchPlan::open(file_);
    three = write_goal_study(plan, "three", 3, 450);
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.find("three");
  const HypervolumeHistory history = hypervolume_history(s);
  ASSERT_LE(history.points.size(), 200u);
  ASSERT_FALSE(history.points.empty());
  EXPECT_EQ(history.points.back().first, 450);
  for (size_t i = 1; i < history.points.size(); ++i)
    EXPECT_GE(history.points[i].second, history.points[i - 1].second);
  std::vector<std::vector<double>> final_front;
  for (int64_t number : brute_force_front(three)) final_front.push_back(*three[number - 1].values);
  EXPECT_DOUBLE_EQ(history.points.back().second,
                   hypervolume(final_front, history.reference, {true, false, false}));
  // Objectives past the second are in the titles, not on the axes.
  EXPECT_NE(pareto_svg(s).find(", o2 "), std::string::npos);
}

TEST_F(GoalsTest, FourObjectivesHaveAFrontButNoHypervolume) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_goal_study(plan, "four", 4, 30);
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.studies[0];
  EXPECT_TRUE(hypervolume_history(s).points.empty());
  EXPECT_NE(hypervolume_svg(s).find("this study has 4"), std::string::npos);
  EXPECT_FALSE(circles(pareto_svg(s), "front").empty());
}

TEST_F(ModelTest, AStudyOfOneObjectiveKeepsItsHistoryAndTable) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "s");
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.studies[0];
  EXPECT_FALSE(s.goals.multi());
  const std::string page = study_page(s).content;
  EXPECT_NE(page.find("class=\"history\""), std::string::npos);
  EXPECT_EQ(page.find("class=\"pareto"), std::string::npos);
  EXPECT_EQ(page.find("\"feasible\""), std::string::npos);
  EXPECT_NE(studies_page(view).content.find("loss 0.5"), std::string::npos);
}

// A tree past kMaxStagesDrawn stages expands from its top or below a stage, breadth first, to at
// most its limit; its page links to each expansion and back, keeping the selected trials, and
// says how many stages the limit left out.
TEST_F(ModelTest, AnExpandedTreeDrawsBreadthFirstUpToItsLimitAndSaysWhatItLeftOut) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    testing::LargeStudy o;
    o.trials = 2100;  // 300 warm-up stages [0, 100), each with its trials' own [100, 900)
    o.workers = 10;
    testing::write_large_study(plan, "large", o);
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  const PlanView view = read_plan(reader, 100);
  const StudyView& s = *view.studies[0];
  ASSERT_EQ(s.stages.size(), 2400u);
  const Drawing d = drawing_of(s);
  auto drawn = [](const std::string& html) {
    std::smatch m;
    EXPECT_TRUE(
        std::regex_search(html, m, std::regex("data-stages=\"2400\" data-drawn=\"([0-9]+)\"")));
    return m.empty() ? 0 : std::stoul(m[1]);
  };
  // Collapsed: the paths of the critical and top trials, links to expand.
  const std::string collapsed = tree_page(s).content;
  EXPECT_LT(drawn(collapsed), 200u);
  EXPECT_NE(collapsed.find("href=\"?expand=all\">expand all</a>"), std::string::npos);
  EXPECT_NE(collapsed.find("<input type=\"number\" name=\"expand\""), std::string::npos);
  EXPECT_EQ(collapsed.find("class=\"collapse\""), std::string::npos);
  EXPECT_EQ(collapsed.find("tree-limit"), std::string::npos);
  // Every stage under the limit: no band, nothing left out, a link back.
  TreeExpansion everything;
  everything.all = true;
  const std::string all = tree_page(s, {7}, everything).content;
  EXPECT_EQ(drawn(all), 2400u);
  EXPECT_EQ(all.find("class=\"collapsed\""), std::string::npos);
  EXPECT_EQ(all.find("tree-limit"), std::string::npos);
  EXPECT_NE(all.find("class=\"collapse\" href=\"?trial=7\""), std::string::npos);
  EXPECT_NE(all.find("<input type=\"hidden\" name=\"expand\" value=\"all\">"),
            std::string::npos);  // drawing a trial's path keeps the expansion
  // Past the limit: breadth first (every warm-up stage before any trial's own), parents drawn.
  TreeExpansion limited = everything;
  limited.limit = 1000;
  const TreeDrawn t = tree_stages_drawn(s, d, limited);
  EXPECT_EQ(t.shown, 1000u);
  EXPECT_EQ(t.left_out, 1400u);
  std::map<StageId, size_t> position;
  for (size_t i = 0; i < s.stages.size(); ++i) position[s.stages[i].stage.id] = i;
  for (size_t i = 0; i < s.stages.size(); ++i) {
    const Stage& st = s.stages[i].stage;
    if (st.start == 0) {
      EXPECT_TRUE(t.drawn[i]) << "warm-up stage " << st.id;
    }
    if (t.drawn[i] && st.parent != kNoStage) {
      EXPECT_TRUE(t.drawn[position.at(st.parent)]) << st.id;
    }
  }
  const std::string page = tree_page(s, {}, limited).content;
  EXPECT_EQ(drawn(page), 1000u);
  EXPECT_NE(page.find("<p class=\"note tree-limit\" data-left-out=\"1400\">1400 stages not shown"),
            std::string::npos);
  EXPECT_NE(page.find("class=\"collapsed\" data-count=\"1400\""), std::string::npos);
  // Below one warm-up stage: it, its children and the collapsed paths; nothing left out.
  const StageView& warmup = s.stages[0];
  ASSERT_EQ(warmup.stage.start, 0);
  const TreeDrawn below = tree_stages_drawn(s, d, {.below = warmup.stage.id});
  EXPECT_EQ(below.left_out, 0u);
  for (StageId child : warmup.stage.children) EXPECT_TRUE(below.drawn[position.at(child)]);
  const TreeDrawn kept = tree_stages_drawn(s, d, {});
  size_t expected = 0;
  for (size_t i = 0; i < s.stages.size(); ++i)
    expected += kept.drawn[i] || i == 0 || s.stages[i].stage.parent == warmup.stage.id;
  EXPECT_EQ(below.shown, expected);
  EXPECT_THROW(tree_page(s, {}, {.below = 999999}), std::out_of_range);
}

// A study read alone (hippo report) reads only the part of the tree its trials live in (their
// root keys: storage's load_study_tree, its stages renumbered) and the checkpoints of that part,
// and shows the same stages, by the plan's ids, as a read of the whole plan.
TEST_F(ModelTest, AStudyReadAloneReadsItsPartOfTheTreeAndShowsWhatTheWholeReadShows) {
  {
    SearchPlan plan = SearchPlan::open(file_);
    write_study(plan, "first");  // root key "r": the plan's first stages
    testing::LargeStudy o;
    o.trials = 700;
    o.workers = 10;
    testing::write_large_study(plan, "large", o);  // root key "large": stages after r's
    StageTree tree = plan.load_tree();
    const StageId last = static_cast<StageId>(tree.stages().size()) - 1;
    plan.add_checkpoint({0, last, tree.stage(last).start + 1, "large.ckpt", 1, "", 0});
  }
  SearchPlan reader = SearchPlan::open_read_only(file_);
  const StageTree whole = reader.load_tree();
  const StudyTree part = reader.load_study_tree(2);
  EXPECT_LT(part.tree.stages().size(), whole.stages().size());
  EXPECT_EQ(part.tree.stages().size(), part.plan_ids.size());
  EXPECT_EQ(part.tree.trials().size(), 700u);
  EXPECT_GT(part.plan_ids.front(), 0);  // renumbered: r's stages come first in the plan
  EXPECT_EQ(reader.study_tree_checkpoints(2).size(), 1u);
  EXPECT_EQ(reader.study_tree_checkpoints(1).size(), 1u);
  const PlanView all = read_plan(reader, 100);
  ASSERT_EQ(all.studies.size(), 2u);
  for (const std::string name : {"first", "large"}) {
    const PlanView alone = read_plan(reader, 100, name);
    ASSERT_EQ(alone.studies.size(), 1u);
    const StudyView &a = *alone.studies[0], &w = *all.find(name);
    ASSERT_EQ(a.stages.size(), w.stages.size()) << name;
    for (size_t i = 0; i < a.stages.size(); ++i) {
      EXPECT_EQ(a.stages[i].stage, w.stages[i].stage) << name << " " << i;
      EXPECT_EQ(a.stages[i].checkpoints, w.stages[i].checkpoints) << name << " " << i;
      EXPECT_EQ(a.stages[i].on_critical_path, w.stages[i].on_critical_path) << name << " " << i;
    }
    EXPECT_EQ(a.steps_unique, w.steps_unique) << name;
    EXPECT_EQ(a.executions.size(), w.executions.size()) << name;
    EXPECT_EQ(study_page(a).content, study_page(w).content) << name;
    EXPECT_EQ(tree_page(a).content, tree_page(w).content) << name;
    EXPECT_EQ(timeline_page(a).content, timeline_page(w).content) << name;
  }
}

}  // namespace
}  // namespace hippo::dashboard
