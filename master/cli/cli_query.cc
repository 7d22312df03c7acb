// Study history: `hippo studies`, `trials`, `best`, `tree`, `export`. They read the search plan
// file directly (WAL lets them read while a master writes), so they work with or without a
// master running. A study is named by its name or its id.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "master/cli/cli.h"
#include "master/cli/report.h"
#include "master/reports.h"
#include "protocol/failpoint.h"
#include "protocol/text.h"
#include "searchers/spec.h"
#include "storage/plan.h"

namespace hippo::cli {
namespace {

using nlohmann::json;

StudyRow find_study(SearchPlan& plan, const std::string& name_or_id) {
  if (auto s = plan.study_by_name(name_or_id)) return *s;
  if (std::optional<int64_t> id = study_id_in(name_or_id))
    if (auto s = plan.study(*id); s && !s->deleted_at) return *s;
  throw BadInput("no study named " + name_or_id + " in " + plan.path());
}

struct StudyView {
  StudyRow row;
  std::string metric;  // the first objective's
  Goals goals;
  std::vector<TrialRow> trials;
  std::vector<std::string> param_names;  // in the spec's order (master::param_order)
  std::vector<MetricRow> all_metrics;    // by (trial, step, name)
  std::map<TrialId, std::vector<MetricRow>> metrics;
  std::set<TrialId> diverged;
  // With several objectives or constraints (goals.multi()): each trial's result, and which are
  // Pareto-optimal and feasible (master/reports.h).
  std::map<TrialId, master::TrialResult> results;
  std::vector<master::TrialResult> front;
};

StudyView view(SearchPlan& plan, const StudyRow& row) {
  StudyView v;
  v.row = row;
  try {
    v.goals = goals_of(row.spec);  // the stored spec was checked when it was submitted
  } catch (const SpecError& e) {
    throw RunFailed("study " + row.name + ": its stored spec is unreadable: " + e.what());
  }
  v.metric = v.goals.objectives[0].metric;
  v.trials = plan.trials(row.id);
  std::vector<const json*> params;
  for (const TrialRow& t : v.trials) params.push_back(&t.params);
  v.param_names = master::param_order(row.spec, params);
  v.all_metrics = plan.study_metrics(row.id);
  for (const MetricRow& m : v.all_metrics) v.metrics[m.trial].push_back(m);
  for (const TrialRow& t : v.trials)
    if (t.status == TrialStatus::kDiverged) v.diverged.insert(t.id);
  if (v.goals.multi()) {
    std::vector<master::TrialResult> results =
        master::trial_results(v.all_metrics, v.goals, v.diverged);
    v.front = master::pareto_optimal(results, v.goals);
    for (master::TrialResult& r : results) v.results[r.trial] = std::move(r);
  }
  return v;
}

bool on_front(const StudyView& v, TrialId trial) {
  return std::any_of(v.front.begin(), v.front.end(),
                     [&](const master::TrialResult& r) { return r.trial == trial; });
}

const TrialRow& trial_row(const StudyView& v, TrialId id) {
  for (const TrialRow& t : v.trials)
    if (t.id == id) return t;
  throw RunFailed("study " + v.row.name + ": no trial with id " + std::to_string(id));
}

// The best (trial, metric row) of a study of one objective, if any trial has the metric: its
// best value anywhere, or under constraints the first of the best feasible results
// (master/reports.h).
std::optional<std::pair<const TrialRow*, MetricRow>> best_of(const StudyView& v) {
  if (v.goals.multi()) {
    if (v.front.empty()) return std::nullopt;
    const master::TrialResult& r = v.front[0];
    return std::make_pair(&trial_row(v, r.trial),
                          MetricRow{r.trial, r.step, v.metric, r.values[0]});
  }
  std::optional<MetricRow> best =
      master::best_metric(v.all_metrics, v.goals.objectives[0], v.diverged);
  if (!best) return std::nullopt;
  return std::make_pair(&trial_row(v, best->trial), *best);
}

// "accuracy (max), params (min)" for several objectives; the metric for one.
std::string objectives_text(const Goals& goals) {
  if (!goals.several()) return goals.objectives[0].metric;
  std::string text;
  for (const Objective& o : goals.objectives)
    text += (text.empty() ? "" : ", ") + o.metric + (o.maximize ? " (max)" : " (min)");
  return text;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A number as it is, lossless: the shortest text that reads back as the same double (CSV of
// `export`), and "nan", "inf", "-inf" for the others.
std::string exact_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return json(v).dump();
}

json trial_json(const StudyView& v, const TrialRow& t) {
  json metrics = json::array();
  auto it = v.metrics.find(t.id);
  if (it != v.metrics.end())
    for (const MetricRow& m : it->second)
      metrics.push_back({{"step", m.step}, {"name", m.name}, {"value", m.value}});
  json j = {{"trial", t.number},
            {"params", t.params},
            {"status", to_string(t.status)},
            {"length", t.length},
            {"metrics", metrics}};
  // Why it ended early, and where: a failed trial's error, a diverged one's metric.
  if (t.status == TrialStatus::kFailed) j["error"] = t.end_reason;
  if (t.status == TrialStatus::kDiverged) j["diverged"] = t.end_reason;
  if (t.end_step) j["end_step"] = *t.end_step;
  // With several objectives or constraints: its values at its last evaluation, whether the
  // constraints hold there, and whether it is on the Pareto front.
  if (auto r = v.results.find(t.id); r != v.results.end()) {
    j["values"] = master::values_json(r->second, v.goals);
    j["values_step"] = r->second.step;
    j["feasible"] = r->second.feasible();
    j["pareto_optimal"] = on_front(v, t.id);
  }
  return j;
}

// What a query prints: `json` as one line, or `rows` as CSV or a table.
void print_as(Format format, const json& json_form,
              const std::vector<std::vector<std::string>>& rows) {
  if (format == Format::kJson)
    std::printf("%s\n", json_form.dump().c_str());
  else if (format == Format::kCsv)
    print_csv(rows);
  else
    print_table(rows);
}

int studies(const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  json out = json::array();
  std::vector<std::vector<std::string>> rows = {
      {"id", "name", "status", "policy", "trials", "metric", "best"}};
  for (const StudyRow& row : plan.studies()) {
    StudyView v = view(plan, row);
    auto best = v.goals.several() ? std::nullopt : best_of(v);
    json entry = {{"id", row.id},
                  {"name", row.name},
                  {"status", to_string(row.status)},
                  {"policy", to_string(row.policy)},
                  {"trials", v.trials.size()},
                  {"metric", v.metric},
                  {"best", best ? json(best->second.value) : json(nullptr)}};
    std::string best_text = best ? number_text(best->second.value) : "-";
    if (v.goals.several()) {  // the size of the front takes the place of a best value
      entry["objectives"] = json::array();
      for (const Objective& o : v.goals.objectives)
        entry["objectives"].push_back({{"metric", o.metric}, {"mode", o.maximize ? "max" : "min"}});
      entry["front"] = v.front.size();
      best_text = std::to_string(v.front.size()) + " on the front";
    }
    out.push_back(entry);
    rows.push_back({std::to_string(row.id), row.name, to_string(row.status), to_string(row.policy),
                    std::to_string(v.trials.size()), objectives_text(v.goals), best_text});
  }
  print_as(global.format, out, rows);
  return 0;
}

// One row per trial: number, status, length, where it ended early (a stopped, diverged or failed
// trial's step), every parameter in the spec's order, the last value of the metric.
std::vector<std::vector<std::string>> trial_rows(const StudyView& v, bool every_metric) {
  const std::vector<std::string>& params = v.param_names;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"trial", "status", "length", "end_step"};
  header.insert(header.end(), params.begin(), params.end());
  if (every_metric) {
    header.insert(header.end(), {"step", "metric", "value"});
    // Each row carries its trial's verdicts: whether it is feasible and on the Pareto front.
    if (v.goals.multi()) header.insert(header.end(), {"feasible", "pareto"});
  } else if (v.goals.multi()) {  // the last evaluation's values of the goals, and the verdicts
    header.push_back("step");
    for (const Objective& o : v.goals.objectives) header.push_back(o.metric);
    header.insert(header.end(), {"feasible", "pareto"});
  } else {
    header.insert(header.end(), {"step", v.metric});
  }
  rows.push_back(header);
  for (const TrialRow& t : v.trials) {
    std::vector<std::string> row = {std::to_string(t.number), to_string(t.status),
                                    std::to_string(t.length),
                                    t.end_step ? std::to_string(*t.end_step) : ""};
    for (const std::string& p : params)
      row.push_back(t.params.contains(p) ? cell(t.params[p]) : "");
    auto it = v.metrics.find(t.id);
    std::vector<MetricRow> ms = it == v.metrics.end() ? std::vector<MetricRow>{} : it->second;
    if (every_metric) {
      // A row per metric (a trial without any keeps one row), each with its trial's verdicts
      // when the study has several objectives or constraints.
      std::vector<std::string> verdicts;
      if (v.goals.multi()) {
        auto r = v.results.find(t.id);
        verdicts = {r == v.results.end()   ? "-"
                    : r->second.feasible() ? "yes"
                                           : "no",
                    on_front(v, t.id) ? "*" : ""};
      }
      std::vector<std::vector<std::string>> cells;  // step, metric, value
      for (const MetricRow& m : ms)
        cells.push_back({std::to_string(m.step), m.name, exact_number(m.value)});
      if (cells.empty()) cells.emplace_back(verdicts.empty() ? 0 : 3, "");
      for (const std::vector<std::string>& c : cells) {
        rows.push_back(row);
        rows.back().insert(rows.back().end(), c.begin(), c.end());
        rows.back().insert(rows.back().end(), verdicts.begin(), verdicts.end());
      }
      continue;
    }
    if (v.goals.multi()) {
      auto r = v.results.find(t.id);
      if (r == v.results.end()) {
        row.insert(row.end(), v.goals.objectives.size() + 3, "-");
      } else {
        row.push_back(std::to_string(r->second.step));
        for (double value : r->second.values) row.push_back(number_text(value));
        row.push_back(r->second.feasible() ? "yes" : "no");
        row.push_back(on_front(v, t.id) ? "*" : "");
      }
      rows.push_back(row);
      continue;
    }
    const MetricRow* last = nullptr;
    for (const MetricRow& m : ms)
      if (m.name == v.metric) last = &m;
    row.push_back(last ? std::to_string(last->step) : "-");
    row.push_back(last ? number_text(last->value) : "-");
    rows.push_back(row);
  }
  return rows;
}

// `hippo trials`'s choice of rows: those whose status is one of `statuses` (--where
// status=done,stopped; all when empty), sorted by a metric's best value (--sort METRIC: best
// first for an objective, ascending otherwise; trials without it last), the first `limit` (0: all).
struct TrialChoice {
  std::set<TrialStatus> statuses;
  std::string sort;
  int64_t limit = 0;
};

TrialChoice parse_choice(const std::vector<std::string>& where, const std::string& sort,
                         int64_t limit) {
  TrialChoice c;
  for (const std::string& w : where) {
    const std::string prefix = "status=";
    if (w.rfind(prefix, 0) != 0)
      throw BadInput("--where " + w + ": expected status=STATUS[,STATUS...], e.g. status=done");
    std::string list = w.substr(prefix.size());
    for (size_t at = 0; at <= list.size();) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      try {
        c.statuses.insert(parse_trial_status(list.substr(at, end - at)));
      } catch (const std::exception& e) {
        throw BadInput("--where " + w + ": " + e.what());
      }
      at = end + 1;
    }
  }
  if (limit < 0) throw BadInput("--limit: expected 0 (all) or more trials");
  c.sort = sort;
  c.limit = limit;
  return c;
}

void choose_trials(StudyView& v, const TrialChoice& c) {
  if (!c.statuses.empty())
    std::erase_if(v.trials, [&](const TrialRow& t) { return !c.statuses.count(t.status); });
  if (!c.sort.empty()) {
    bool maximize = false, reported = false;
    for (const Objective& o : v.goals.objectives) {
      if (o.metric != c.sort) continue;
      maximize = o.maximize;
      reported = true;  // an objective is known before any trial reports it
    }
    std::map<TrialId, double> best;
    for (const MetricRow& m : v.all_metrics) {
      if (m.name != c.sort) continue;
      reported = true;
      if (!std::isfinite(m.value)) continue;
      auto [it, fresh] = best.emplace(m.trial, m.value);
      if (!fresh && (maximize ? m.value > it->second : m.value < it->second)) it->second = m.value;
    }
    if (!reported)
      throw BadInput("--sort " + c.sort + ": no trial of study " + v.row.name + " reported it");
    std::stable_sort(v.trials.begin(), v.trials.end(), [&](const TrialRow& a, const TrialRow& b) {
      auto x = best.find(a.id), y = best.find(b.id);
      if (x == best.end() || y == best.end()) return x != best.end() && y == best.end();
      return maximize ? x->second > y->second : x->second < y->second;
    });
  }
  if (c.limit > 0 && static_cast<size_t>(c.limit) < v.trials.size())
    v.trials.resize(static_cast<size_t>(c.limit));
}

int trials(const std::string& name, const GlobalOptions& global, bool export_all,
           const TrialChoice& choice = {}) {
  SearchPlan plan = open_existing_plan(global.db);
  StudyView v = view(plan, find_study(plan, name));
  choose_trials(v, choice);
  if (global.format == Format::kJson) {
    json out = json::array();
    for (const TrialRow& t : v.trials) out.push_back(trial_json(v, t));
    std::printf("%s\n", out.dump().c_str());
  } else if (global.format == Format::kCsv) {
    print_csv(trial_rows(v, export_all));
  } else {
    print_table(trial_rows(v, export_all));
  }
  return 0;
}

// `export --wide`: one row per trial (Python's Study.trials_dataframe() has the same columns):
// trial, status, length, end_step (where it ended before its length), the parameters in the
// spec's order (the search space's leaves), step (its last evaluation), each metric's value there,
// each objective's best value over the trial ("best_" + metric: finite values, hippo best's
// rule), and start, end (unix seconds: entered the plan, ended) and duration (seconds). A missing
// value is null in JSON and an empty cell in CSV; numbers are lossless.
int export_wide(const std::string& name, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  StudyView v = view(plan, find_study(plan, name));
  const std::vector<std::string>& params = v.param_names;
  std::vector<std::string> metrics;  // the objectives', then the others by name
  for (const Objective& o : v.goals.objectives) metrics.push_back(o.metric);
  std::set<std::string> others;
  for (const MetricRow& m : v.all_metrics)
    if (std::find(metrics.begin(), metrics.end(), m.name) == metrics.end()) others.insert(m.name);
  metrics.insert(metrics.end(), others.begin(), others.end());
  const std::set<std::string> fixed = {"trial", "status", "length", "end_step",
                                       "step",  "start",  "end",    "duration"};
  std::vector<std::string> header = {"trial", "status", "length", "end_step"};
  for (const std::string& p : params) header.push_back(fixed.count(p) ? "param:" + p : p);
  header.push_back("step");
  header.insert(header.end(), metrics.begin(), metrics.end());
  for (const Objective& o : v.goals.objectives) header.push_back("best_" + o.metric);
  header.insert(header.end(), {"start", "end", "duration"});

  auto number = [](double x) { return std::isfinite(x) ? json(x) : json(exact_number(x)); };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();  // columns in the header's order
  for (const TrialRow& t : v.trials) {
    std::vector<json> row = {t.number, to_string(t.status), t.length,
                             t.end_step ? json(*t.end_step) : json(nullptr)};
    for (const std::string& p : params) row.push_back(t.params.contains(p) ? t.params[p] : json());
    auto it = v.metrics.find(t.id);
    const std::vector<MetricRow> none;
    const std::vector<MetricRow>& ms = it == v.metrics.end() ? none : it->second;
    const int64_t last_step = ms.empty() ? -1 : ms.back().step;  // by (step, name)
    row.push_back(ms.empty() ? json(nullptr) : json(last_step));
    for (const std::string& metric : metrics) {
      json last;
      for (const MetricRow& m : ms)
        if (m.name == metric && m.step == last_step) last = number(m.value);
      row.push_back(last);
    }
    for (const Objective& o : v.goals.objectives) {
      std::optional<double> best;
      for (const MetricRow& m : ms)
        if (m.name == o.metric && std::isfinite(m.value) &&
            (!best || better(m.value, *best, o.maximize)))
          best = m.value;
      row.push_back(best ? json(*best) : json(nullptr));
    }
    row.push_back(t.created_at);
    row.push_back(t.ended_at ? json(*t.ended_at) : json(nullptr));
    row.push_back(t.ended_at ? json(*t.ended_at - t.created_at) : json(nullptr));
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (size_t i = 0; i < header.size(); ++i) object[header[i]] = row[i];
    out.push_back(object);
  }
  if (global.format == Format::kJson) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {header};
  for (const nlohmann::ordered_json& object : out) {
    rows.emplace_back();
    for (const std::string& column : header) {
      const json value = object.at(column);
      rows.back().push_back(value.is_null() ? "" : cell(value));
    }
  }
  if (global.format == Format::kCsv)
    print_csv(rows);
  else
    print_table(rows);
  return 0;
}

// `best` of a study of several objectives: the Pareto-optimal feasible trials.
int print_front(const StudyView& v, const GlobalOptions& global) {
  if (v.front.empty())
    throw RunFailed("study " + v.row.name + " has no feasible trial with every objective (" +
                    objectives_text(v.goals) + ") yet");
  json out = json::array();
  std::vector<std::vector<std::string>> rows = {{"trial", "step"}};
  for (const Objective& o : v.goals.objectives) rows[0].push_back(o.metric);
  rows[0].push_back("params");
  for (const master::TrialResult& r : v.front) {
    const TrialRow& t = trial_row(v, r.trial);
    out.push_back({{"trial", t.number},
                   {"params", t.params},
                   {"values", master::values_json(r, v.goals)},
                   {"step", r.step}});
    rows.push_back({std::to_string(t.number), std::to_string(r.step)});
    for (double value : r.values) rows.back().push_back(number_text(value));
    rows.back().push_back(master::ordered_params(t.params, v.param_names).dump());
  }
  print_as(global.format, out, rows);
  return 0;
}

int best(const std::string& name, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  StudyView v = view(plan, find_study(plan, name));
  if (v.goals.several()) return print_front(v, global);
  auto b = best_of(v);
  if (!b)
    throw RunFailed("study " + v.row.name + " has no " +
                    (v.goals.multi() ? "feasible trial with a value of " : "value of ") + v.metric +
                    " yet");
  // Its params in the spec's order, in JSON as in the table.
  const nlohmann::ordered_json params = master::ordered_params(b->first->params, v.param_names);
  // Its status too: the best value may be a trial's that its searcher stopped (at end_step).
  const TrialRow& t = *b->first;
  nlohmann::ordered_json out = {
      {"study", v.row.name},          {"trial", t.number},        {"params", params},
      {"metric", v.metric},           {"value", b->second.value}, {"step", b->second.step},
      {"status", to_string(t.status)}};
  if (t.end_step) out["end_step"] = *t.end_step;
  const std::string status =
      to_string(t.status) + (t.end_step ? " at " + std::to_string(*t.end_step) : "");
  const std::vector<std::vector<std::string>> rows = {
      {"trial", "status", "metric", "value", "step", "params"},
      {std::to_string(t.number), status, v.metric, number_text(b->second.value),
       std::to_string(b->second.step), params.dump()}};
  if (global.format == Format::kJson)
    std::printf("%s\n", out.dump().c_str());
  else
    print_as(global.format, json(), rows);
  return 0;
}

int tree(const std::string& name, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  StudyRow row = find_study(plan, name);
  StageTree t = plan.load_tree();
  std::map<TrialId, int64_t> numbers;  // this study's trials -> their numbers
  for (const TrialRow& tr : plan.trials(row.id)) numbers[tr.id] = tr.number;
  std::set<StageId> on_paths;
  for (const auto& [id, number] : numbers)
    if (t.has_trial(id))
      for (StageId s : t.path(id)) on_paths.insert(s);
  if (global.format != Format::kTable) {  // one record per stage
    json out = json::array();
    for (StageId id : on_paths) {
      const Stage& s = t.stage(id);
      json ending = json::array();
      for (TrialId tr : t.trials_ending_in(id))
        if (numbers.count(tr)) ending.push_back(numbers[tr]);
      out.push_back({{"stage", id},
                     {"parent", s.parent},
                     {"start", s.start},
                     {"end", s.end},
                     {"trained_until", s.trained_until},
                     {"trials_ending", ending}});
    }
    if (global.format == Format::kJson) {
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    // CSV: the same fields, the trials ending in a stage separated by spaces.
    const std::vector<std::string> fields = {"stage", "parent",        "start",
                                             "end",   "trained_until", "trials_ending"};
    std::vector<std::vector<std::string>> rows = {fields};
    for (const json& stage : out) {
      std::vector<std::string> row;
      for (const std::string& field : fields) {
        const json& value = stage[field];
        std::string text;
        for (const json& item : value.is_array() ? value : json::array({value})) {
          if (!text.empty()) text += ' ';
          text += cell(item);
        }
        row.push_back(text);
      }
      rows.push_back(row);
    }
    print_csv(rows);
    return 0;
  }
  std::printf("study %s: %zu stages\n", protocol::printable(row.name).c_str(), on_paths.size());
  print_tree(
      t, [&](StageId id) { return on_paths.count(id) != 0; },
      [&](TrialId id) {
        auto it = numbers.find(id);
        return it == numbers.end() ? std::string() : std::to_string(it->second);
      },
      true);
  return 0;
}

// `hippo delete STUDY`: a study that has ended leaves the plan's listings and frees its name; its
// trials stay in the stage tree that other studies share, and its checkpoints are kept for later
// studies or evicted under the disk budget like any other's (master/retention.h).
int delete_study(const std::string& name, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  StudyRow row = find_study(plan, name);
  protocol::failpoint("delete.read");  // a master may resume it now (tests/e2e/race_test.cc)
  try {
    // Its status is checked by the statement that deletes it (a master may resume it meanwhile).
    plan.delete_study(row.id);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string(e.what()) + " (hippo cancel " + row.name + ")");
  }
  if (global.format == Format::kJson)
    std::printf("%s\n",
                json{{"deleted", row.name}, {"id", row.id}, {"status", to_string(row.status)}}
                    .dump()
                    .c_str());
  else
    std::printf("deleted study %s (%s, %zu trials)\n", protocol::printable(row.name).c_str(),
                to_string(row.status), plan.trials(row.id).size());
  return 0;
}

// What the master recorded when the study ended (`run` printed the same, master/master.h's
// record_summary); a study that ended before summaries were recorded has its account only.
json summary_of(SearchPlan& plan, const StudyRow& row) {
  if (row.status == StudyStatus::kRunning)
    throw BadInput("study " + row.name +
                   " is running: its summary comes when it ends (hippo wait " + row.name + ")");
  if (std::optional<EventRow> e = plan.last_event(row.id, "summary")) return e->detail;
  std::fprintf(stderr, "study %s ended before its summary was recorded: its account only\n",
               protocol::printable(row.name).c_str());
  const int64_t trials = static_cast<int64_t>(plan.trials(row.id).size());
  const StudyAccount& a = row.account;
  json s = {{"study", row.name},
            {"status", to_string(row.status)},
            {"trials", trials},
            {"steps_executed", a.steps_executed},
            {"wall_s",
             std::max(0.0, row.ended_at.value_or(row.created_at) - row.created_at - a.paused_s)},
            {"active_s", a.run_s},
            {"makespan_ratio", 0},
            {"master_ms_per_trial", trials > 0 ? 1000 * a.master_s / trials : 0.0}};
  if (!row.error.empty()) s["error"] = row.error;
  return s;
}

int summary(const std::string& name, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  print_summary(summary_of(plan, find_study(plan, name)), global.format);
  return 0;
}

// `hippo wait STUDY`: reads the plan every quarter second until the study is no longer running
// (a cluster's master ends it), prints its summary, and says how it ended in its exit status:
// 0 done, 1 failed or cancelled, 3 interrupted (resumable), 124 still running after --timeout.
int wait_for(const std::string& name, double timeout_s, const GlobalOptions& global) {
  if (!(timeout_s >= 0)) throw BadInput("--timeout: expected seconds >= 0 (0: no limit)");
  SearchPlan plan = open_existing_plan(global.db);
  const int64_t id = find_study(plan, name).id;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::optional<StudyRow> row = plan.study(id);
    if (!row || row->deleted_at) throw RunFailed("study " + name + " was deleted meanwhile");
    if (row->status != StudyStatus::kRunning) {
      print_summary(summary_of(plan, *row), global.format);
      if (row->status == StudyStatus::kDone) return 0;
      return row->status == StudyStatus::kInterrupted ? 3 : 1;
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited >= timeout_s) {
      std::fprintf(stderr, "study %s is still running after %.0f s (--timeout)\n",
                   protocol::printable(row->name).c_str(), waited);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

void require_plan(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw BadInput("no search plan at " + path + " (give --db FILE or set HIPPO_DB)");
}

SearchPlan open_existing_plan(const std::string& path) {
  require_plan(path);
  try {
    return SearchPlan::open(path);
  } catch (const std::exception& e) {
    throw BadInput(e.what());
  }
}

void add_query_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* list = app.add_subcommand("studies", "list the studies of the search plan");
  list->fallthrough();
  set_action(list, action, kEveryFormat, [&global] { return studies(global); });
  struct Named {
    const char* name;
    const char* help;
    Formats formats;
    std::function<int(const std::string&, const GlobalOptions&)> run;
  };
  const Named commands[] = {
      {"best", "the best trial of a study (with several objectives, its Pareto front)",
       kEveryFormat, best},
      {"tree", "the stage tree of a study, with trained progress", kEveryFormat, tree},
      {"delete", "remove a study that has ended from the plan (its name is free again)",
       kTableOrJson, delete_study},
      {"summary", "the summary of a study that has ended, as `run` printed it", kTableOrJson,
       summary},
  };
  for (const Named& c : commands) {
    CLI::App* cmd = app.add_subcommand(c.name, c.help);
    cmd->fallthrough();
    auto study = std::make_shared<std::string>();
    add_study_argument(cmd, study.get());
    auto run = c.run;
    set_action(cmd, action, c.formats, [study, run, &global] { return run(*study, global); });
  }
  // `export`: a row per (trial, step, metric), or with --wide a row per trial.
  {
    CLI::App* cmd = app.add_subcommand(
        "export", "every trial with parameters and all metrics (--wide: one row per trial)");
    cmd->fallthrough();
    auto study = std::make_shared<std::string>();
    auto wide = std::make_shared<bool>(false);
    add_study_argument(cmd, study.get());
    cmd->add_flag("--wide", *wide,
                  "one row per trial: parameters, last and best values, status, steps, times");
    set_action(cmd, action, {Format::kCsv, Format::kJson, Format::kTable}, [study, wide, &global] {
      return *wide ? export_wide(*study, global) : trials(*study, global, true);
    });
  }
  // `trials`, with the rows to show: a study of 100,000 trials is read in the terminal through
  // these (its table has a row per trial).
  CLI::App* cmd =
      app.add_subcommand("trials", "the trials of a study with their parameters and last metric");
  cmd->fallthrough();
  struct Args {
    std::string study, sort;
    std::vector<std::string> where;
    int64_t limit = 0;
  };
  auto args = std::make_shared<Args>();
  add_study_argument(cmd, &args->study);
  cmd->add_option("--limit", args->limit, "show the first N trials only (default: all)");
  cmd->add_option("--sort", args->sort,
                  "by a metric's best value (an objective's best first; others ascending)");
  cmd->add_option("--where", args->where, "status=STATUS[,STATUS...]: only trials in these");
  set_action(cmd, action, kEveryFormat, [args, &global] {
    return trials(args->study, global, false, parse_choice(args->where, args->sort, args->limit));
  });
  CLI::App* wait = app.add_subcommand(
      "wait",
      "wait for a study (of a cluster's master) to end, print its summary; exit status 0 done, 1 "
      "failed or cancelled, 3 interrupted, 124 --timeout");
  wait->fallthrough();
  auto waited = std::make_shared<std::pair<std::string, double>>("", 0.0);
  add_study_argument(wait, &waited->first);
  wait->add_option("--timeout", waited->second, "give up after this many seconds (default: never)");
  set_action(wait, action, kTableOrJson,
             [waited, &global] { return wait_for(waited->first, waited->second, global); });
}

}  // namespace hippo::cli
