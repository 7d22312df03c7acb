// The dashboard and the report in a real headless browser (chromium over the DevTools protocol),
// against a search plan made by real `hippo run`s: every page loads without a console error, and
// its DOM holds what the plan holds (a curve per trial, a box per stage, a bar per execution, the
// saving = steps_trial_based / steps_unique of the run); a page opened while a study runs shows
// its progress growing; the report opens with the network cut off and shows the same figures.
// Screenshots of every page are written to HIPPO_SCREENSHOTS.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "searchers/pareto.h"
#include "storage/plan.h"
#include "tests/dashboard/browser.h"
#include "tests/dashboard/dashboard_fixture.h"

namespace hippo::testing {
namespace {

class DashboardBrowser : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!Browser::available()) return;
    plan_ = new RealPlan;
    plan_->make("browser");
    dashboard_ = new DashboardProcess(plan_->db, (plan_->dir / "dashboard.log").string());
    browser_ = new Browser((plan_->dir / "profile").string());
    fs::create_directories(HIPPO_SCREENSHOTS);
  }
  static void TearDownTestSuite() {
    delete browser_;
    delete dashboard_;
    if (plan_) fs::remove_all(plan_->dir);
    delete plan_;
  }
  void SetUp() override {
    if (!Browser::available()) GTEST_SKIP() << "chromium is not installed (scripts/setup)";
    ASSERT_GT(dashboard_->port(), 0) << dashboard_->log();
  }

  // Opens a page of the dashboard, checks it loaded without an error, keeps a screenshot.
  Browser::Tab load(const std::string& path, const std::string& screenshot) {
    Browser::Tab tab = browser_->open();
    browser_->navigate(tab, dashboard_->url(path));
    EXPECT_TRUE(browser_->errors(tab).empty()) << path << ": " << browser_->errors(tab)[0];
    browser_->screenshot(tab, std::string(HIPPO_SCREENSHOTS) + "/" + screenshot + ".png");
    return tab;
  }
  int64_t count(const Browser::Tab& tab, const std::string& selector) {
    return browser_->evaluate(tab, "document.querySelectorAll('" + selector + "').length");
  }
  static std::string study_id(const std::string& name) {
    SearchPlan plan = SearchPlan::open_read_only(plan_->db);
    return std::to_string(plan.study_by_name(name)->id);
  }
  static json cli(const std::string& command) {
    auto r = sh(kHippo + " --db " + plan_->db + " --format json " + command);
    EXPECT_EQ(r.status, 0) << command;
    return json::parse(r.out);
  }
  static double saving_of_run(const std::string& name) {
    const json& r = plan_->runs.at(name);
    return r["steps_trial_based"].get<double>() / r["steps_unique"].get<double>();
  }

  static RealPlan* plan_;
  static DashboardProcess* dashboard_;
  static Browser* browser_;
};
RealPlan* DashboardBrowser::plan_ = nullptr;
DashboardProcess* DashboardBrowser::dashboard_ = nullptr;
Browser* DashboardBrowser::browser_ = nullptr;

TEST_F(DashboardBrowser, StudiesPageListsEveryStudyWithWhatSharingSaved) {
  Browser::Tab tab = load("/", "studies");
  json studies = cli("studies");
  ASSERT_EQ(count(tab, "tr.study"), static_cast<int64_t>(studies.size()));
  for (const json& s : studies) {
    const std::string name = s["name"];
    double shown = browser_->evaluate(tab, "Number(document.querySelector('tr.study[data-study=\"" +
                                               std::to_string(s["id"].get<int64_t>()) +
                                               "\"]').dataset.saving)");
    EXPECT_NEAR(shown, saving_of_run(name), 1e-4) << name;
  }
  // The trial-based run saves nothing; the grid shares its first epochs.
  EXPECT_DOUBLE_EQ(saving_of_run("grid-trial-based"), 1.0);
  EXPECT_GT(saving_of_run("grid"), 1.0);
  // A name that is markup shows as text, and runs nothing (no dialog: errors() would say).
  std::string text = browser_->evaluate(tab, "document.querySelector('table.studies').innerText");
  EXPECT_NE(text.find("<img src=x onerror=alert(1)>&\"'"), std::string::npos);
  EXPECT_EQ(count(tab, "table.studies img"), 0);
  EXPECT_TRUE(browser_->errors(tab).empty());
  browser_->close(tab);
}

TEST_F(DashboardBrowser, StudyPageDrawsACurvePerTrialAndTheTrialTable) {
  for (const std::string name : {"grid", "asha", "lr-decay"}) {
    Browser::Tab tab = load("/study/" + study_id(name), "study-" + name);
    json trials = cli("trials " + name);
    const std::string metric = plan_->runs[name]["best"]["metric"];
    int64_t with_values = 0;
    for (const json& t : trials) {
      bool any = false;
      for (const json& m : t["metrics"]) any = any || m["name"] == metric;
      with_values += any;
    }
    EXPECT_EQ(count(tab, "svg.curves path.curve"), with_values) << name;
    EXPECT_EQ(with_values, static_cast<int64_t>(trials.size())) << name;
    // Every curve is a trial of the plan, once.
    std::set<int64_t> numbers;
    for (const json& n : browser_->evaluate(
             tab, "[...document.querySelectorAll('path.curve')].map(p => Number(p.dataset.trial))"))
      numbers.insert(n.get<int64_t>());
    EXPECT_EQ(numbers.size(), trials.size());
    // The saving shown is the run's steps_trial_based / steps_unique, the steps its own.
    json summary =
        browser_->evaluate(tab, "Object.assign({}, document.querySelector('dl.summary').dataset)");
    EXPECT_NEAR(std::stod(summary["saving"].get<std::string>()), saving_of_run(name), 1e-4);
    EXPECT_EQ(std::stoll(summary["stepsTrialBased"].get<std::string>()),
              plan_->runs[name]["steps_trial_based"].get<int64_t>());
    EXPECT_EQ(std::stoll(summary["stepsUnique"].get<std::string>()),
              plan_->runs[name]["steps_unique"].get<int64_t>());
    EXPECT_EQ(std::stoll(summary["stepsExecuted"].get<std::string>()),
              plan_->runs[name]["steps_executed"].get<int64_t>());
    // The table: every trial, sortable and filterable.
    EXPECT_EQ(
        browser_->evaluate(tab, "Number(document.querySelector('.trial-table').dataset.shown)")
            .get<int64_t>(),
        static_cast<int64_t>(trials.size()));
    EXPECT_EQ(count(tab, "table.trials tr.trial"), std::min<int64_t>(50, trials.size()));
    // The server sorts: the best first at first, then by number, ascending and (clicked again)
    // descending.
    const std::string first_row = "document.querySelector('table.trials tr.trial').dataset.trial";
    EXPECT_EQ(browser_->evaluate(tab, first_row).get<std::string>(),
              std::to_string(plan_->runs[name]["best"]["trial"].get<int64_t>()));
    for (const std::string& want : {std::string("1"), std::to_string(trials.size())}) {
      browser_->evaluate(tab,
                         "document.querySelector('table.trials th[data-column=\"0\"]').click()");
      EXPECT_TRUE(
          browser_->wait_until(tab, first_row + " === '" + want + "'", std::chrono::seconds(10)))
          << want;
    }
    browser_->evaluate(tab,
                       "(() => { const i = document.querySelector('.table-controls input');"
                       " i.value = 'trial=2'; i.dispatchEvent(new Event('input')); })()");
    EXPECT_TRUE(
        browser_->wait_until(tab, "document.querySelectorAll('table.trials tr.trial').length === 1",
                             std::chrono::seconds(10)));
    // A slice per parameter, parallel coordinates, the history.
    EXPECT_EQ(count(tab, "svg.slice"), static_cast<int64_t>(trials[0]["params"].size()));
    // (Under 50 trials each is among the top 50: drawn one by one.)
    EXPECT_EQ(count(tab, "svg.parallel path.line.exact"), std::min<int64_t>(50, trials.size()));
    EXPECT_EQ(count(tab, "svg.history path.best-line"), 1);
    EXPECT_TRUE(browser_->errors(tab).empty());
    browser_->close(tab);
  }
}

TEST_F(DashboardBrowser, StudyOfTwoObjectivesDrawsItsFrontAndHowItsHypervolumeGrew) {
  const std::string name = "mo-smoke";
  Browser::Tab tab = load("/study/" + study_id(name), "study-" + name);
  // From the plan's rows alone: each trial's last evaluation that has accuracy and loss, feasible
  // when its loss is at most 1.2, on the front when no feasible trial is at least as good in
  // both and better in one; diverged trials are never feasible, and not drawn.
  struct Result {
    double accuracy, loss;
    bool feasible;
  };
  std::map<int64_t, Result> results;
  for (const json& t : cli("trials " + name)) {
    if (t["status"] == "diverged") continue;
    std::map<int64_t, std::map<std::string, double>> at;
    for (const json& m : t["metrics"])
      if (m["value"].is_number()) at[m["step"]][m["name"]] = m["value"];
    for (auto it = at.rbegin(); it != at.rend(); ++it)
      if (it->second.count("accuracy") && it->second.count("loss")) {
        const double loss = it->second["loss"];
        results[t["trial"]] = {it->second["accuracy"], loss, loss <= 1.2};
        break;
      }
  }
  std::set<int64_t> front, infeasible;
  std::vector<std::vector<double>> feasible_values, front_values;
  for (const auto& [number, r] : results) {
    if (!r.feasible) {
      infeasible.insert(number);
      continue;
    }
    feasible_values.push_back({r.accuracy, r.loss});
    bool dominated = false;
    for (const auto& [other, o] : results)
      dominated = dominated || (o.feasible && o.accuracy >= r.accuracy && o.loss <= r.loss &&
                                (o.accuracy > r.accuracy || o.loss < r.loss));
    if (!dominated) {
      front.insert(number);
      front_values.push_back({r.accuracy, r.loss});
    }
  }
  ASSERT_FALSE(front.empty());
  std::set<int64_t> best;  // `hippo best` prints the same front
  for (const json& t : cli("best " + name)) best.insert(t["trial"].get<int64_t>());
  EXPECT_EQ(best, front);

  auto marked = [&](const std::string& selector) {
    std::set<int64_t> numbers;
    for (const json& n : browser_->evaluate(tab, "[...document.querySelectorAll('" + selector +
                                                     "')].map(c => Number(c.dataset.trial))"))
      numbers.insert(n.get<int64_t>());
    return numbers;
  };
  EXPECT_EQ(marked("svg.pareto circle.trial.front"), front);
  EXPECT_EQ(marked("svg.pareto circle.trial.infeasible"), infeasible);
  EXPECT_EQ(count(tab, "svg.pareto circle.trial"),
            static_cast<int64_t>(front.size() + infeasible.size() +
                                 marked("svg.pareto circle.trial.feasible").size()));
  EXPECT_EQ(count(tab, "svg.pareto circle.trial title"), count(tab, "svg.pareto circle.trial"));
  EXPECT_EQ(count(tab, "svg.history"), 0);  // the two figures replace it

  // The hypervolume: never falling, at the end pareto.h's of the front above, measured from the
  // reference point of every feasible result.
  json volumes = browser_->evaluate(tab,
                                    "[...document.querySelectorAll('svg.hypervolume circle.hv')]"
                                    ".map(c => Number(c.dataset.hypervolume))");
  ASSERT_FALSE(volumes.empty());
  for (size_t i = 1; i < volumes.size(); ++i)
    EXPECT_GE(volumes[i].get<double>(), volumes[i - 1].get<double>());
  const Directions directions = {true, false};
  EXPECT_DOUBLE_EQ(
      volumes.back().get<double>(),
      hypervolume(front_values, *hypervolume_reference(feasible_values, directions), directions));

  // The table: each objective at the result, feasibility and the front.
  json columns = browser_->evaluate(
      tab, "[...document.querySelectorAll('table.trials th')].map(t => t.textContent)");
  for (const char* column : {"accuracy", "loss", "feasible", "pareto"})
    EXPECT_NE(std::find(columns.begin(), columns.end(), column), columns.end()) << column;
  // The studies list counts the front.
  Browser::Tab studies = browser_->open();
  browser_->navigate(studies, dashboard_->url("/"));
  EXPECT_NE(browser_->evaluate(studies, "document.querySelector('table.studies').innerText")
                .get<std::string>()
                .find(std::to_string(front.size()) + " on the front"),
            std::string::npos);
  EXPECT_TRUE(browser_->errors(tab).empty());
  browser_->close(studies);
  browser_->close(tab);
}

TEST_F(DashboardBrowser, TreePageDrawsABoxPerStageWithItsDetails) {
  for (const std::string name : {"grid", "grid-trial-based", "asha", "lr-decay"}) {
    Browser::Tab tab = load("/study/" + study_id(name) + "/tree", "tree-" + name);
    json stages = cli("tree " + name);
    ASSERT_EQ(count(tab, "svg.tree g.stage"), static_cast<int64_t>(stages.size())) << name;
    for (const json& s : stages) {
      const std::string id = std::to_string(s["stage"].get<int64_t>());
      json box = browser_->evaluate(
          tab, "Object.assign({}, document.querySelector('g.stage[data-stage=\"" + id +
                   "\"]').dataset)");
      ASSERT_TRUE(box.is_object()) << "no box for stage " << id;
      EXPECT_EQ(box["start"], std::to_string(s["start"].get<int64_t>()));
      EXPECT_EQ(box["end"], std::to_string(s["end"].get<int64_t>()));
      EXPECT_EQ(box["trained"], std::to_string(s["trained_until"].get<int64_t>()));
    }
    // Every study here has ended: nothing is training or pending.
    EXPECT_EQ(count(tab, "g.stage[data-state=\"training\"]") +
                  count(tab, "g.stage[data-state=\"pending\"]"),
              0);
    // A click shows the stage's details.
    browser_->evaluate(tab,
                       "document.querySelector('g.stage rect').dispatchEvent(new "
                       "MouseEvent('click', {bubbles: true}))");
    std::string details =
        browser_->evaluate(tab, "document.querySelector('.stage-details').textContent");
    EXPECT_NE(details.find("trials through it"), std::string::npos) << details;
    EXPECT_TRUE(browser_->errors(tab).empty());
    browser_->close(tab);
  }
  // Sharing shows: the grid's stages hold fewer steps than the trial-based run of the same trials.
  auto steps = [](const json& stages) {
    int64_t n = 0;
    for (const json& s : stages) n += s["end"].get<int64_t>() - s["start"].get<int64_t>();
    return n;
  };
  EXPECT_LT(steps(cli("tree grid")), steps(cli("tree grid-trial-based")));
}

TEST_F(DashboardBrowser, TimelineDrawsEveryExecutionOnItsWorkersLane) {
  for (const std::string name : {"grid", "asha"}) {
    Browser::Tab tab = load("/study/" + study_id(name) + "/timeline", "timeline-" + name);
    SearchPlan plan = SearchPlan::open_read_only(plan_->db);
    std::vector<ExecutionRow> executions = plan.executions(plan.study_by_name(name)->id);
    ASSERT_FALSE(executions.empty());
    EXPECT_EQ(count(tab, "svg.timeline rect.execution"), static_cast<int64_t>(executions.size()));
    std::set<std::string> workers;
    for (const ExecutionRow& e : executions) workers.insert(e.worker);
    EXPECT_EQ(count(tab, "svg.timeline g.lane"), static_cast<int64_t>(workers.size()));
    int64_t steps = 0;
    for (const ExecutionRow& e : executions) steps += e.reached - e.from;
    EXPECT_EQ(steps, plan_->runs[name]["steps_executed"].get<int64_t>());
    EXPECT_TRUE(browser_->errors(tab).empty());
    browser_->close(tab);
  }
}

TEST_F(DashboardBrowser, ComparePageShowsStudiesSideBySide) {
  Browser::Tab tab =
      load("/compare?id=" + study_id("grid") + "&id=" + study_id("grid-trial-based"), "compare");
  EXPECT_EQ(count(tab, "section.compared dl.summary"), 2);
  EXPECT_EQ(count(tab, "svg.compare path.study-line"), 2);
  browser_->close(tab);
}

TEST_F(DashboardBrowser, ReportOpensOfflineAndShowsTheSameFigures) {
  const std::string file = (plan_->dir / "report.html").string();
  auto r = sh(kHippo + " --db " + plan_->db + " report grid -o " + file);
  ASSERT_EQ(r.status, 0);
  Browser::Tab live = load("/study/" + study_id("grid"), "study-grid-again");
  Browser::Tab tree = load("/study/" + study_id("grid") + "/tree", "tree-grid-again");
  Browser::Tab timeline = load("/study/" + study_id("grid") + "/timeline", "timeline-grid-again");

  Browser::Tab tab = browser_->open();
  browser_->go_offline(tab);
  browser_->navigate(tab, "file://" + file);
  browser_->screenshot(tab, std::string(HIPPO_SCREENSHOTS) + "/report-grid.png");
  EXPECT_TRUE(browser_->errors(tab).empty()) << browser_->errors(tab)[0];
  // Nothing but the file itself was asked for.
  for (const std::string& url : browser_->requests(tab)) EXPECT_EQ(url, "file://" + file);
  // The same figures, element for element.
  for (const auto& [selector, page] :
       std::vector<std::pair<std::string, Browser::Tab*>>{{"svg.curves", &live},
                                                          {"svg.history", &live},
                                                          {"svg.parallel", &live},
                                                          {"svg.tree", &tree},
                                                          {"svg.timeline", &timeline}}) {
    std::string expression = "document.querySelector('" + selector + "').outerHTML";
    EXPECT_EQ(browser_->evaluate(tab, expression), browser_->evaluate(*page, expression))
        << selector;
  }
  EXPECT_EQ(count(tab, "path.curve"), count(live, "path.curve"));
  EXPECT_EQ(count(tab, "g.stage"), count(tree, "g.stage"));
  EXPECT_EQ(browser_->evaluate(tab, "document.querySelector('dl.summary').dataset.saving"),
            browser_->evaluate(live, "document.querySelector('dl.summary').dataset.saving"));
  EXPECT_EQ(count(tab, "table.trials tr.trial"), count(live, "table.trials tr.trial"));
  for (const Browser::Tab* t : {&tab, &live, &tree, &timeline}) browser_->close(*t);
}

// A study that runs while the page is open: the page fetches its new content by itself.
TEST_F(DashboardBrowser, APageOpenedWhileAStudyRunsShowsItsProgressGrowing) {
  RealPlan running;
  running.dir = plan_->dir / "running";
  fs::create_directories(running.dir);
  running.db = (running.dir / "plan.db").string();
  // About six thousand steps: seconds of training on two workers (a minute under ASan).
  std::string spec = running.spec("long.json", "long",
                                  {{"data", {{"train_samples", 4096}, {"eval_samples", 256}}},
                                   {"length", {{"epochs", 24}}},
                                   {"eval", {{"every", {{"epochs", 2}}}}}});
  pid_t run = fork();
  if (run == 0) {
    if (!freopen((running.dir / "run.log").c_str(), "w", stderr)) _exit(126);
    if (!freopen("/dev/null", "w", stdout)) _exit(126);
    execl(kHippo.c_str(), kHippo.c_str(), "--db", running.db.c_str(), "run", spec.c_str(),
          "--workers", "2", nullptr);
    _exit(127);
  }
  // Wait until the study is in the plan, then serve it.
  for (int i = 0; i < 200; ++i) {
    auto r = sh(kHippo + " --db " + running.db + " --format json studies 2>/dev/null");
    if (r.status == 0 && r.out.find("\"long\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  DashboardProcess dashboard(running.db, (running.dir / "dashboard.log").string(),
                             {"--refresh", "0.2"});
  ASSERT_GT(dashboard.port(), 0) << dashboard.log();
  Browser::Tab tab = browser_->open();
  browser_->navigate(tab, dashboard.url("/study/long"));
  browser_->evaluate(tab, "window.openedOnce = true");  // gone if the page were reloaded
  double first =
      browser_->evaluate(tab, "Number(document.querySelector('progress.progress').value)");
  std::string status =
      browser_->evaluate(tab, "document.querySelector('dl.summary .status').textContent");
  EXPECT_EQ(status, "running") << "the study ended before the page opened: make it longer";
  EXPECT_LT(first, 1.0);
  EXPECT_TRUE(browser_->wait_until(
      tab, "Number(document.querySelector('progress.progress').value) > " + std::to_string(first),
      std::chrono::seconds(30)))
      << "progress stayed at " << first;
  double later =
      browser_->evaluate(tab, "Number(document.querySelector('progress.progress').value)");
  browser_->screenshot(tab, std::string(HIPPO_SCREENSHOTS) + "/study-running.png");
  // To the end: the page shows the study done, without a reload.
  EXPECT_TRUE(browser_->wait_until(
      tab, "document.querySelector('dl.summary .status').textContent === 'done'",
      std::chrono::seconds(300)));
  EXPECT_EQ(browser_->evaluate(tab, "window.openedOnce"), true);
  double last =
      browser_->evaluate(tab, "Number(document.querySelector('progress.progress').value)");
  EXPECT_GT(later, first);
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_TRUE(browser_->errors(tab).empty()) << browser_->errors(tab)[0];
  browser_->close(tab);
  int run_status = 0;
  waitpid(run, &run_status, 0);
  EXPECT_TRUE(WIFEXITED(run_status) && WEXITSTATUS(run_status) == 0);
}

}  // namespace
}  // namespace hippo::testing
