// The summarized figures, as a property over random studies built in memory: whatever the study,
// the top k trials by the goal (and with two objectives every trial of the front) are drawn one by
// one, and the density of each figure counts every other trial exactly once. Below the threshold
// the same code draws every point.
#include "dashboard/summary.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <regex>
#include <set>

#include "dashboard/figures.h"
#include "dashboard/table.h"
#include "searchers/pareto.h"

namespace hippo::dashboard {
namespace {

// The data-trial of the marks drawn one by one (circles, curves, lines with data-role).
std::set<int64_t> exact_trials(const std::string& svg) {
  std::set<int64_t> out;
  static const std::regex exact(
      "data-trial=\"([0-9]+)\"[^>]*data-role=|data-role=\"[a-z]+\" data-trial=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), exact); it != std::sregex_iterator();
       ++it)
    out.insert(std::stoll((*it)[1].matched ? (*it)[1].str() : (*it)[2].str()));
  return out;
}

int64_t attribute(const std::string& svg, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(svg, m, std::regex(" " + name + "=\"([0-9]+)\""))) return -1;
  return std::stoll(m[1]);
}

// The sum of every density group's count.
int64_t density_count(const std::string& svg) {
  int64_t sum = 0;
  static const std::regex group("<g class=\"density\" data-count=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), group); it != std::sregex_iterator();
       ++it)
    sum += std::stoll((*it)[1]);
  return sum;
}

// A random study: n trials, some without a value, ties, a numeric and a categorical parameter,
// one or two objectives.
StudyView random_study(std::mt19937_64& rng, size_t n, size_t objectives) {
  StudyView s;
  s.goals.objectives.push_back({"accuracy", true});
  if (objectives > 1) s.goals.objectives.push_back({"latency", false});
  s.metric = "accuracy";
  s.maximize = true;
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<ParetoPoint> points;
  std::vector<size_t> owners;  // the trial of each point
  for (size_t i = 0; i < n; ++i) {
    TrialView t;
    t.row.number = static_cast<int64_t>(i + 1);
    t.row.id = static_cast<TrialId>(i);
    t.row.status = TrialStatus::kDone;
    t.row.params = {{"lr", std::pow(10.0, -4 * u(rng))}, {"opt", u(rng) < 0.5 ? "adam" : "sgd"}};
    if (u(rng) < 0.9) {
      const double a = std::round(u(rng) * 200) / 200;  // ties
      for (int64_t step = 10; step <= 30; step += 10) t.curve.emplace_back(step, a * step / 30);
      t.best = a;
      if (objectives > 1) {
        t.result = GoalResult{30, {a, u(rng)}, 0, true, false};
        points.push_back({t.result->values, 0});
        owners.push_back(i);
      }
    }
    s.trials.push_back(std::move(t));
  }
  if (objectives > 1) {
    for (size_t k : pareto_front(points, {true, false})) {
      TrialView& t = s.trials[owners[k]];
      t.result->pareto_optimal = true;
      s.front.push_back(t.row.number);
    }
    std::sort(s.front.begin(), s.front.end());
  }
  return s;
}

TEST(Summary, TopTrialsAreDrawnExactlyAndDensitiesCountEveryOtherTrialOnce) {
  std::mt19937_64 rng(47);
  for (int round = 0; round < 12; ++round) {
    const size_t n = 50 + rng() % 1500, objectives = 1 + round % 2;
    const StudyView s = random_study(rng, n, objectives);
    const size_t every_up_to = round < 2 ? n : n / 3;  // the first rounds draw everything
    const Drawing d = drawing_of(s, {7}, every_up_to, 20);
    ASSERT_EQ(d.summarized, every_up_to < n);
    size_t with_value = 0, exact_with_value = 0;
    for (const TrialView& t : s.trials) {
      with_value += t.best.has_value();
      exact_with_value += t.best && d.exact.count(t.row.number);
    }
    // The top k: by a brute-force sort of every value.
    std::vector<std::pair<double, int64_t>> ranked;
    for (const TrialView& t : s.trials)
      if (t.best) ranked.emplace_back(-*t.best, t.row.number);
    std::sort(ranked.begin(), ranked.end());
    std::set<int64_t> top;
    if (objectives == 1) {
      for (size_t i = 0; i < 20 && i < ranked.size(); ++i) top.insert(ranked[i].second);
    } else {
      top.insert(s.front.begin(), s.front.end());
    }
    EXPECT_EQ(std::set<int64_t>(d.top.begin(), d.top.end()), top) << round;

    for (const std::string& svg : {history_svg(s, d), parallel_svg(s, d)}) {
      const std::set<int64_t> drawn = exact_trials(svg);
      for (int64_t t : top) EXPECT_TRUE(drawn.count(t)) << round << ": trial " << t;
      EXPECT_EQ(drawn.size(), exact_with_value) << round;
      const int64_t rest = static_cast<int64_t>(with_value - exact_with_value);
      if (d.summarized) {
        EXPECT_EQ(attribute(svg, "data-binned"), rest) << round;
        EXPECT_EQ(density_count(svg), rest) << round;
      } else {
        EXPECT_EQ(std::max(attribute(svg, "data-dots"), attribute(svg, "data-lines")), rest);
        EXPECT_EQ(density_count(svg), 0);
      }
    }
    for (const auto& [name, svg] : slice_svgs(s, d)) {
      EXPECT_EQ(exact_trials(svg).size(), exact_with_value) << name;
      if (d.summarized) {
        EXPECT_EQ(density_count(svg), static_cast<int64_t>(with_value - exact_with_value));
      }
    }
    const std::string curves = curves_svg(s, d);
    if (d.summarized) {
      EXPECT_EQ(attribute(curves, "data-banded"),
                static_cast<int64_t>(with_value - exact_with_value));
      for (int64_t t : top)
        EXPECT_NE(curves.find("data-trial=\"" + std::to_string(t) + "\" data-role"),
                  std::string::npos);
    } else {
      size_t paths = 0;
      for (size_t at = curves.find("class=\"curve\""); at != std::string::npos;
           at = curves.find("class=\"curve\"", at + 1))
        ++paths;
      EXPECT_EQ(paths, with_value);  // every curve
    }
    if (objectives > 1) {
      // Every trial of the front, one by one; the others counted once.
      const std::string front = pareto_svg(s, d);
      std::set<int64_t> circles;
      static const std::regex circle("<circle class=\"trial[a-z ]*\" data-trial=\"([0-9]+)\"");
      for (auto it = std::sregex_iterator(front.begin(), front.end(), circle);
           it != std::sregex_iterator(); ++it)
        circles.insert(std::stoll((*it)[1]));
      for (int64_t t : s.front) EXPECT_TRUE(circles.count(t)) << round << ": front " << t;
      if (d.summarized) {
        EXPECT_EQ(density_count(front) + static_cast<int64_t>(circles.size()),
                  static_cast<int64_t>(with_value));
      } else {
        EXPECT_EQ(circles.size(), with_value);
      }
    }
    // Selected: drawn one by one wherever it has a value.
    if (s.trials[6].best) {
      EXPECT_TRUE(exact_trials(history_svg(s, d)).count(7));
    }
  }
}

TEST(Summary, ADensityCountsEveryPointOnceWhereverItFalls) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-50, 150);
  Density d(0, 0, 100, 60, 6);
  for (int i = 0; i < 10000; ++i) d.add(u(rng), u(rng));
  d.add(std::numeric_limits<double>::quiet_NaN(), 1e308);
  int64_t sum = 0;
  for (int r = 0; r < d.rows(); ++r)
    for (int c = 0; c < d.columns(); ++c) sum += d.count(c, r);
  EXPECT_EQ(sum, 10001);
  EXPECT_EQ(d.total(), 10001);
}

TEST(Summary, ImportanceFindsTheParameterThatDecides) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  StudyView s;
  s.goals.objectives.push_back({"accuracy", true});
  for (int i = 0; i < 3000; ++i) {
    TrialView t;
    t.row.number = i + 1;
    const double lr = u(rng), noise = u(rng);
    t.row.params = {{"lr", lr}, {"noise", noise}, {"opt", i % 2 ? "a" : "b"}};
    t.best = std::sin(3 * lr) + 0.05 * u(rng);
    s.trials.push_back(std::move(t));
  }
  const std::vector<Importance> m = importances(s);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].parameter, "lr");
  EXPECT_GT(m[0].share, 0.8);
  EXPECT_LT(m[1].share, 0.02);
  EXPECT_LT(m[2].share, 0.02);
}

TEST(Table, PagesSortAndFilterOnTheServerAndFindATrial) {
  std::mt19937_64 rng(9);
  StudyView s = random_study(rng, 500, 1);
  const TrialTable table = trial_table(s);
  TableQuery q = default_query(table);
  const nlohmann::json first = table_page(table, q);
  ASSERT_EQ(first["rows"].size(), kTablePage);
  // The goal's best first.
  const Drawing d = drawing_of(s, {}, 1000, 1);
  EXPECT_EQ(first["rows"][0][0], d.top[0]);
  q.filter = "opt=adam lr<0.01";
  const nlohmann::json filtered = table_page(table, q);
  size_t expected = 0;
  for (const TrialView& t : s.trials)
    expected += t.row.params["opt"] == "adam" && t.row.params["lr"].get<double>() < 0.01;
  EXPECT_EQ(filtered["shown"], expected);
  q.filter = "";
  q.trial = 321;
  const nlohmann::json found = table_page(table, q);
  EXPECT_EQ(found["trial"], 321);
  bool there = false;
  for (const auto& row : found["rows"]) there = there || row[0] == 321;
  EXPECT_TRUE(there);
  q.sort = 99;
  EXPECT_THROW(table_page(table, q), std::invalid_argument);
  // The report's archive: gzip (magic 1f 8b) in base64 ("H4sI").
  EXPECT_EQ(compressed_table(table).rfind("H4sI", 0), 0u);
}

// Every page ordered only up to itself (table_page) is the same slice of one whole order: by the
// column, ties by trial number, empty cells last.
TEST(Table, PagesAreSlicesOfOneWholeOrder) {
  std::mt19937_64 rng(11);
  const StudyView s = random_study(rng, 700, 1);  // best values with ties and empty ones
  const TrialTable table = trial_table(s);
  for (const bool descending : {false, true}) {
    TableQuery q = default_query(table);
    q.descending = descending;
    std::vector<nlohmann::json> rows;
    const size_t pages = table_page(table, q)["pages"];
    for (q.page = 0; q.page < pages; ++q.page) {
      const nlohmann::json page = table_page(table, q);
      for (const auto& row : page["rows"]) rows.push_back(row);
    }
    ASSERT_EQ(rows.size(), s.trials.size());
    for (size_t i = 1; i < rows.size(); ++i) {
      const nlohmann::json &a = rows[i - 1][q.sort], &b = rows[i][q.sort];
      if (a.is_null() || b.is_null()) {
        EXPECT_TRUE(b.is_null()) << "empty cells last, at row " << i;
        if (a.is_null()) {
          EXPECT_LT(rows[i - 1][0], rows[i][0]);
        }
        continue;
      }
      const double x = a.get<double>(), y = b.get<double>();
      EXPECT_TRUE(descending ? x >= y : x <= y) << "at row " << i;
      if (x == y) {
        EXPECT_LT(rows[i - 1][0], rows[i][0]) << "ties by number, at row " << i;
      }
    }
  }
}

// The parameters looked up once (param_columns) are those of parameter_names(), in its order,
// each trial's value where it has one, with its number.
TEST(Summary, ParameterColumnsHoldEveryTrialsValues) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  StudyView s;
  s.goals.objectives.push_back({"accuracy", true});
  s.param_names = {"wd", "lr"};  // the spec's order; "opt" and "depth" are not in it
  for (int i = 0; i < 400; ++i) {
    TrialView t;
    t.row.number = i + 1;
    if (i % 7 != 3) {
      t.row.params = {{"lr", u(rng)}};
      if (i % 3) t.row.params["wd"] = u(rng) < 0.5 ? nlohmann::json(1) : nlohmann::json(0.25);
      if (i % 5) t.row.params["opt"] = i % 2 ? "adam" : "sgd";
      if (i % 11 == 0) t.row.params["depth"] = i % 22 ? nlohmann::json(4) : nlohmann::json("deep");
    }
    s.trials.push_back(std::move(t));
  }
  const std::vector<ParamColumn> columns = param_columns(s);
  std::vector<std::string> names;
  for (const ParamColumn& c : columns) names.push_back(c.name);
  EXPECT_EQ(names, s.parameter_names());
  for (const ParamColumn& c : columns) {
    ASSERT_EQ(c.values.size(), s.trials.size());
    bool any = false, all = true;
    for (size_t i = 0; i < s.trials.size(); ++i) {
      const nlohmann::json& params = s.trials[i].row.params;
      const bool has = params.is_object() && params.contains(c.name);
      ASSERT_EQ(c.values[i] != nullptr, has) << c.name << " of trial " << i + 1;
      if (!has) continue;
      EXPECT_EQ(*c.values[i], params[c.name]);
      const bool number = params[c.name].is_number();
      EXPECT_EQ(c.numbers[i].has_value(), number);
      if (number) {
        EXPECT_EQ(*c.numbers[i], params[c.name].get<double>());
      }
      any = any || number;
      all = all && number;
    }
    EXPECT_TRUE(c.present);
    EXPECT_EQ(c.any_number, any) << c.name;
    EXPECT_EQ(c.all_numbers, all) << c.name;
  }
}

}  // namespace
}  // namespace hippo::dashboard
