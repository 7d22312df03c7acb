// The dashboard and the report at 100,000 trials (issue "A dashboard and a report for 100,000
// trials"): plans written straight through the plan API (large_plan.h: an ASHA study of one
// objective and one of two, 100,000 trials each on 1,000 workers, and one of 10,000), read by a
// real `hippo report` and a real `hippo dashboard`, the pages in headless chromium. Sizes and
// element counts, not times (bench_dashboard measures those).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <regex>
#include <set>

#include "storage/plan.h"
#include "tests/dashboard/browser.h"
#include "tests/dashboard/dashboard_fixture.h"
#include "tests/dashboard/large_plan.h"

namespace hippo::testing {
namespace {

constexpr size_t kFiveMegabytes = 5 * 1000 * 1000;

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A GET with curl: the body (decoded), the bytes that came over the wire, the status, the ETag.
struct Got {
  std::string body;
  size_t wire = 0;
  int status = 0;
  std::string etag;
};

class Scale : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("hippo-dashboard-scale-" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    db_ = new std::string((*dir_ / "plan.db").string());
    SearchPlan plan = SearchPlan::open(*db_);
    LargeStudy one;
    write_large_study(plan, "one", one);
    LargeStudy two;
    two.objectives = 2;
    two.seed = 2;
    write_large_study(plan, "two", two);
    LargeStudy ten;
    ten.trials = 10000;
    ten.seed = 3;
    write_large_study(plan, "ten", ten);
    // The heaviest study drawn whole: 10,000 trials of two objectives (a circle and a title each
    // on the front's figure).
    LargeStudy ten_two = ten;
    ten_two.objectives = 2;
    write_large_study(plan, "ten-two", ten_two);
    // Written once, read by the tests: each 100,000-trial report and the dashboard's first read
    // take seconds.
    for (const char* study : {"one", "two"}) report(study);
    dashboard_ = new DashboardProcess(*db_, (*dir_ / "dashboard.log").string());
  }
  static void TearDownTestSuite() {
    delete dashboard_;
    fs::remove_all(*dir_);
    delete dir_;
    delete db_;
  }
  void SetUp() override { ASSERT_GT(dashboard_->port(), 0) << dashboard_->log(); }

  static json cli(const std::string& command) {
    auto r = sh(kHippo + " --db " + *db_ + " --format json " + command);
    EXPECT_EQ(r.status, 0) << command << ": " << r.out;
    return json::parse(r.out);
  }
  static Got get(const std::string& url, const std::vector<std::string>& headers = {}) {
    const std::string body = (*dir_ / "body").string(), head = (*dir_ / "head").string();
    std::string command =
        "curl -s --compressed -o " + body + " -D " + head + " -w '%{size_download}' ";
    for (const std::string& h : headers) command += "-H '" + h + "' ";
    auto r = sh(command + "'" + url + "'");
    Got g;
    g.wire = std::stoul(r.out);
    g.body = e2e::read_file(body);
    const std::string h = e2e::read_file(head);
    g.status = std::atoi(h.substr(h.find(' ') + 1, 3).c_str());
    std::smatch m;
    if (std::regex_search(h, m, std::regex("ETag: (\"[^\"\\r]*\")"))) g.etag = m[1];
    return g;
  }
  static std::string report(const std::string& study, const std::string& flags = "") {
    const std::string file = (*dir_ / (study + ".html")).string();
    fs::remove(file);
    auto r =
        sh(kHippo + " --db " + *db_ + " report " + study + " -o " + file + " " + flags + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    return file;
  }

  static fs::path* dir_;
  static std::string* db_;
  static DashboardProcess* dashboard_;
};
fs::path* Scale::dir_ = nullptr;
std::string* Scale::db_ = nullptr;
DashboardProcess* Scale::dashboard_ = nullptr;

TEST_F(Scale, ReportsOfAHundredThousandTrialsAreAtMostFiveMegabytesAndAsPrivateAsThePlan) {
  for (const std::string study : {"one", "two"}) {
    const std::string file = (*dir_ / (study + ".html")).string();  // SetUpTestSuite's
    EXPECT_LE(fs::file_size(file), kFiveMegabytes) << study;
    const std::string html = e2e::read_file(file);
    EXPECT_EQ(occurrences(html, "class=\"trial-archive\""), 1u);
    EXPECT_NE(html.find("data-summarized=\"1\""), std::string::npos);
    struct stat plan {
    }, written{};
    ASSERT_EQ(::stat(db_->c_str(), &plan), 0);
    ASSERT_EQ(::stat(file.c_str(), &written), 0);
    EXPECT_EQ(written.st_mode & 0777, plan.st_mode & 0666) << study;  // 0600: the plan's
  }
  struct stat asked {};
  ASSERT_EQ(::stat(report("ten", "--mode 0644").c_str(), &asked), 0);
  EXPECT_EQ(asked.st_mode & 0777, 0644u);
  auto r = sh(kHippo + " --db " + *db_ + " report ten -o " + (*dir_ / "x.html").string() +
              " --mode 4755 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--mode 4755"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(*dir_ / "x.html"));
}

TEST_F(Scale, StudyPagesAreAtMostFiveMegabytesAndAtTenThousandTrialsDrawEveryPoint) {
  DashboardProcess& dashboard = *dashboard_;
  for (const std::string study : {"1", "2"}) {
    const Got page = get(dashboard.url("/study/" + study));
    ASSERT_EQ(page.status, 200);
    EXPECT_LE(page.body.size(), kFiveMegabytes) << study;
    EXPECT_LT(page.wire, page.body.size() / 3) << study << ": gzip";
    EXPECT_NE(page.body.find("data-summarized=\"1\""), std::string::npos);
  }
  const Got heaviest = get(dashboard.url("/study/4"));
  EXPECT_LE(heaviest.body.size(), kFiveMegabytes);
  EXPECT_EQ(heaviest.body.find("data-summarized=\"1\""), std::string::npos);
  EXPECT_LE(fs::file_size(report("ten-two")), kFiveMegabytes);
  // 10,000 trials: every one drawn, as a dot or one by one.
  const std::string ten = get(dashboard.url("/study/3")).body;
  EXPECT_EQ(ten.find("data-summarized=\"1\""), std::string::npos);
  EXPECT_EQ(occurrences(ten, "class=\"curve\""), 10000u);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(ten, m,
                        std::regex("class=\"history\" viewBox=\"[^\"]*\" data-trials=\"10000\" "
                                   "data-exact=\"([0-9]+)\" data-summarized=\"0\" "
                                   "data-dots=\"([0-9]+)\"")));
  EXPECT_EQ(std::stoll(m[1]) + std::stoll(m[2]), 10000);
  std::regex slice(
      "class=\"slice\" viewBox=\"[^\"]*\" data-param=\"[a-z]+\" data-trials=\"10000\" "
      "data-exact=\"([0-9]+)\" "
      "data-summarized=\"0\" data-dots=\"([0-9]+)\"");
  size_t slices = 0;
  for (auto it = std::sregex_iterator(ten.begin(), ten.end(), slice); it != std::sregex_iterator();
       ++it, ++slices)
    EXPECT_EQ(std::stoll((*it)[1]) + std::stoll((*it)[2]), 10000);
  EXPECT_EQ(slices, 5u);
  // The trial table pages on the server, and finds a trial.
  const json page = json::parse(get(dashboard.url("/study/1/trials?trial=77777")).body);
  EXPECT_EQ(page["trial"], 77777);
  EXPECT_EQ(page["total"], 100000);
  EXPECT_LE(page["rows"].size(), 50u);
  EXPECT_EQ(get(dashboard.url("/study/1/trials?sort=99")).status, 400);
  // The tree, collapsed: the critical path and the top trials' paths; a selected trial's path
  // joins them.
  const std::string tree = get(dashboard.url("/study/1/tree")).body;
  std::smatch drawn;
  ASSERT_TRUE(std::regex_search(tree, drawn,
                                std::regex("data-stages=\"([0-9]+)\" data-drawn=\"([0-9]+)\"")));
  EXPECT_LE(std::stoll(drawn[2]), 2000);
  EXPECT_GT(std::stoll(drawn[1]), 100000);
  EXPECT_EQ(tree.find("data-trials=\"77777\""), std::string::npos);
  EXPECT_NE(get(dashboard.url("/study/1/tree?trial=77777")).body.find("data-trials=\"77777\""),
            std::string::npos);
  // Expanded whole, a tree of 10,300 stages (10,000 trials) or of 100,300 draws 5,000 of them
  // (kMaxStagesExpanded) and says how many it left out: a page of bounded size.
  for (const std::string study : {"3", "1"}) {
    const Got expanded = get(dashboard.url("/study/" + study + "/tree?expand=all"));
    ASSERT_EQ(expanded.status, 200);
    EXPECT_LE(expanded.body.size(), 2u * 1000 * 1000) << study;
    ASSERT_TRUE(std::regex_search(expanded.body, drawn,
                                  std::regex("data-stages=\"([0-9]+)\" data-drawn=\"([0-9]+)\"")));
    EXPECT_GT(std::stoll(drawn[1]), 10000) << study;
    EXPECT_EQ(std::stoll(drawn[2]), 5000) << study;
    EXPECT_NE(expanded.body.find("<p class=\"note tree-limit\" data-left-out=\"" +
                                 std::to_string(std::stoll(drawn[1]) - 5000) + "\">"),
              std::string::npos)
        << study;
  }
  // The timeline, aggregated: how busy each group of workers was, not a bar per execution (but
  // those of the critical path).
  const std::string timeline = get(dashboard.url("/study/1/timeline")).body;
  std::smatch busy;
  ASSERT_TRUE(
      std::regex_search(timeline, busy,
                        std::regex("class=\"timeline busy\" [^>]*data-executions=\"([0-9]+)"
                                   "\" data-workers=\"([0-9]+)\" data-lanes=\"([0-9]+)\"")));
  EXPECT_GT(std::stoll(busy[1]), 5000);
  EXPECT_EQ(std::stoll(busy[2]), 1000);
  EXPECT_EQ(std::stoll(busy[3]), 100);
  EXPECT_LT(occurrences(timeline, "class=\"execution"), 1000u);
}

TEST_F(Scale, TheBestTrialAndEveryFrontPointAreFoundInTheBrowser) {
  if (!Browser::available()) GTEST_SKIP() << "chromium is not installed (scripts/setup)";
  DashboardProcess& dashboard = *dashboard_;
  Browser browser((*dir_ / "profile").string());
  fs::create_directories(HIPPO_SCREENSHOTS);
  const int64_t best = cli("best one")["trial"];
  std::set<int64_t> front;
  for (const json& t : cli("best two")) front.insert(t["trial"].get<int64_t>());
  ASSERT_FALSE(front.empty());
  auto count = [&](const Browser::Tab& tab, const std::string& selector) {
    return browser.evaluate(tab, "document.querySelectorAll('" + selector + "').length")
        .get<int64_t>();
  };
  // Screenshots for dashboard/README.md: 10,000 trials, every point drawn; the tree collapsed and
  // the timeline of 1,000 workers at 100,000 trials.
  for (const auto& [path, name] : std::vector<std::pair<std::string, std::string>>{
           {"/study/3", "ten"}, {"/study/1/tree", "tree"}, {"/study/1/timeline", "timeline"}}) {
    Browser::Tab tab = browser.open();
    browser.navigate(tab, dashboard.url(path));
    EXPECT_TRUE(browser.errors(tab).empty()) << path << ": " << browser.errors(tab)[0];
    browser.screenshot(tab, std::string(HIPPO_SCREENSHOTS) + "/scale-" + name + ".png", 2050, 0.6);
    browser.close(tab);
  }
  // The dashboard's pages and the reports (offline), each found the same way.
  const std::string one = (*dir_ / "one.html").string(), two = (*dir_ / "two.html").string();
  const std::vector<std::pair<std::string, bool>> pages = {{dashboard.url("/study/1"), false},
                                                           {"file://" + one, true},
                                                           {dashboard.url("/study/2"), false},
                                                           {"file://" + two, true}};
  for (const auto& [url, offline] : pages) {
    Browser::Tab tab = browser.open();
    if (offline) browser.go_offline(tab);
    browser.navigate(tab, url);
    EXPECT_TRUE(browser.errors(tab).empty()) << url << ": " << browser.errors(tab)[0];
    const bool is_one = url.find("/study/1") != std::string::npos || url == "file://" + one;
    browser.screenshot(tab,
                       std::string(HIPPO_SCREENSHOTS) + "/scale-" + (is_one ? "one" : "two") +
                           (offline ? "-report" : "") + ".png",
                       2050, 0.6);
    if (is_one) {
      const std::string row = "table.trials tr.trial[data-trial=\"" + std::to_string(best) + "\"]";
      EXPECT_EQ(count(tab, row), 1) << url;
      EXPECT_EQ(count(tab, "svg.curves path.curve[data-trial=\"" + std::to_string(best) + "\"]"), 1)
          << url;
      EXPECT_EQ(count(tab, "svg.history circle.trial[data-trial=\"" + std::to_string(best) + "\"]"),
                1)
          << url;
    } else {
      std::set<int64_t> drawn;
      for (const json& n :
           browser.evaluate(tab,
                            "[...document.querySelectorAll('svg.pareto circle.trial.front')].map(c "
                            "=> Number(c.dataset.trial))"))
        drawn.insert(n.get<int64_t>());
      EXPECT_EQ(drawn, front) << url;
    }
    // Jump to a trial: the table shows the page that holds it.
    browser.evaluate(tab,
                     "(() => { const j = document.querySelector('.table-controls input.jump');"
                     " j.value = '77777'; j.nextSibling.click(); })()");
    EXPECT_TRUE(
        browser.wait_until(tab, "!!document.querySelector('tr.trial.chosen[data-trial=\"77777\"]')",
                           std::chrono::seconds(20)))
        << url;
    if (offline) {
      EXPECT_EQ(
          browser.evaluate(tab, "Number(document.querySelector('.trial-table').dataset.decoded)"),
          100000);
    }
    browser.close(tab);
  }
}

// The tree's links work in the browser: expand all (the limit said), the selected stage's link
// below it (the script's), collapse; each a plain GET (followed here by its href, which is what a
// click loads) that keeps the selected trial.
TEST_F(Scale, TheTreeExpandsAndCollapsesInTheBrowser) {
  if (!Browser::available()) GTEST_SKIP() << "chromium is not installed (scripts/setup)";
  Browser browser((*dir_ / "tree-profile").string());
  Browser::Tab tab = browser.open();
  auto follow = [&](const std::string& link) {
    const json href = browser.evaluate(tab, "document.querySelector('" + link + "')?.href");
    ASSERT_TRUE(href.is_string()) << link;
    browser.navigate(tab, href.get<std::string>());
  };
  browser.navigate(tab, dashboard_->url("/study/3/tree?trial=5"));
  const std::string drawn = "Number(document.querySelector('svg.tree').dataset.drawn)";
  EXPECT_LT(browser.evaluate(tab, drawn).get<int64_t>(), 1000);
  follow("a.expand-all");
  EXPECT_EQ(browser.evaluate(tab, "location.search"), "?trial=5&expand=all");
  EXPECT_EQ(browser.evaluate(tab, drawn).get<int64_t>(), 5000);
  EXPECT_TRUE(browser.evaluate(tab, "!!document.querySelector('.tree-limit')").get<bool>());
  fs::create_directories(HIPPO_SCREENSHOTS);
  browser.screenshot(tab, std::string(HIPPO_SCREENSHOTS) + "/scale-tree-expanded.png", 1500, 0.6);
  // The first warm-up stage, selected: its details link to the tree below it.
  const std::string stage = browser.evaluate(
      tab, "document.querySelector('svg.tree g.stage[data-start=\"0\"]').dataset.stage");
  browser.evaluate(tab, "document.querySelector('svg.tree g.stage[data-stage=\"" + stage +
                            "\"] rect').dispatchEvent(new MouseEvent('click', {bubbles: true}))");
  follow(".stage-details a.expand-below");
  EXPECT_EQ(browser.evaluate(tab, "location.search"), "?trial=5&expand=" + stage);
  EXPECT_LT(browser.evaluate(tab, drawn).get<int64_t>(), 1000);
  EXPECT_FALSE(browser.evaluate(tab, "!!document.querySelector('.tree-limit')").get<bool>());
  follow("a.collapse");
  EXPECT_EQ(browser.evaluate(tab, "location.search"), "?trial=5");
  EXPECT_TRUE(browser.errors(tab).empty()) << browser.errors(tab)[0];
  browser.close(tab);
}

// The terminal's way through many trials: `hippo trials --where --sort --limit`.
TEST_F(Scale, TrialsAreChosenSortedAndLimitedInTheTerminal) {
  const json rows = cli("trials ten --where status=done,stopped --sort accuracy --limit 5");
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0]["trial"], cli("best ten")["trial"]);
  auto best_of = [](const json& t) {
    double best = -1;
    for (const json& m : t["metrics"])
      if (m["name"] == "accuracy") best = std::max(best, m["value"].get<double>());
    return best;
  };
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(best_of(rows[i - 1]), best_of(rows[i]));
  const json stopped = cli("trials ten --where status=stopped --limit 100");
  ASSERT_EQ(stopped.size(), 100u);
  for (const json& t : stopped) EXPECT_EQ(t["status"], "stopped");
  for (const char* bad : {"--where lr=1", "--where status=nope", "--sort nothing", "--limit -1"}) {
    auto r = sh(kHippo + " --db " + *db_ + " trials ten " + bad + " 2>&1");
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
  }
}

// A study that grows while the page polls: each poll is the parts that changed, gzipped; a poll
// that has every part gets placeholders only. A plan of its own, of 25,000 trials (summarized,
// as past 10,000): the dashboard reads it again after each write.
TEST_F(Scale, PollsWhileTheStudyIsWrittenAreAtMostAHundredKilobytes) {
  const std::string db = (*dir_ / "growing.db").string();
  {
    SearchPlan plan = SearchPlan::open(db);
    LargeStudy growing;
    growing.trials = 25000;
    growing.running = true;
    write_large_study(plan, "one", growing);
    LargeStudy idle;  // a study nothing writes meanwhile: its page stays the same (304)
    idle.trials = 100;
    write_large_study(plan, "idle", idle);
  }
  DashboardProcess dashboard(db, (*dir_ / "growing.log").string(), {"--refresh", "0.05"});
  ASSERT_GT(dashboard.port(), 0) << dashboard.log();
  const std::string url = dashboard.url("/study/1");
  Got page = get(url, {"Accept-Encoding: gzip"});
  ASSERT_EQ(page.status, 200);
  const std::string idle_url = dashboard.url("/study/idle");
  const Got idle = get(idle_url);
  ASSERT_EQ(idle.status, 200);
  std::string etag = page.etag, content = page.body;
  auto parts = [&] {
    std::string names;
    static const std::regex part("data-part=\"([0-9a-f]{16})\"");
    for (auto it = std::sregex_iterator(content.begin(), content.end(), part);
         it != std::sregex_iterator(); ++it)
      names += (*it)[1].str() + " ";
    return names;
  };
  SearchPlan plan = SearchPlan::open(db);
  for (int batch = 0; batch < 3; ++batch) {
    LargeStudy more;
    more.trials = 200;
    more.seed = 10 + batch;
    more.running = true;
    write_large_study(plan, "one", more, 25001 + 200 * batch, 1);
    // The dashboard reads again no sooner than its last read took: a poll may see the version
    // before (304) for a moment.
    Got poll;
    for (int i = 0; i < 100 && poll.status != 200; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      poll = get(url, {"Accept-Encoding: gzip", "X-Hippo-Part: content", "If-None-Match: " + etag,
                       "X-Hippo-Parts: " + parts()});
      EXPECT_TRUE(poll.status == 200 || poll.status == 304) << poll.status;
    }
    ASSERT_EQ(poll.status, 200) << "batch " << batch;
    EXPECT_LE(poll.wire, 100u * 1000) << "batch " << batch;
    etag = poll.etag;
    content = poll.body;
    EXPECT_NE(content.find(std::to_string(25000 + 200 * (batch + 1)) + "</dd>"), std::string::npos);
  }
  // Nothing written since: 304. Every part at hand: placeholders only. The idle study's page was
  // kept through every write (the dashboard read only the rows that changed): 304 too.
  EXPECT_EQ(get(url, {"X-Hippo-Part: content", "If-None-Match: " + etag}).status, 304);
  EXPECT_EQ(get(idle_url, {"X-Hippo-Part: content", "If-None-Match: " + idle.etag}).status, 304);
  const Got kept = get(url, {"X-Hippo-Part: content", "X-Hippo-Parts: " + parts()});
  EXPECT_LT(kept.body.size(), 3000u);
  EXPECT_EQ(occurrences(kept.body, "data-kept=\"1\""), occurrences(content, "data-part="));
}

}  // namespace
}  // namespace hippo::testing
