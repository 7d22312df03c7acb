#include "dashboard/pages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>

#include "dashboard/assets.h"
#include "dashboard/figures.h"
#include "dashboard/summary.h"
#include "dashboard/table.h"
#include "storage/time_split.h"

namespace hippo::dashboard {
namespace {

// Base64 of the bytes that hex digits spell: CSP wants a hash as base64, cmake gives hex.
std::string hex_to_base64(std::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return base64(bytes);
}

std::string duration(double seconds) {
  char buf[32];
  if (seconds < 120) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 7200) {
    std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  }
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string study_link(const StudyView& s, const std::string& suffix = "") {
  return "/study/" + std::to_string(s.row.id) + suffix;
}

// JSON text that is safe inside a <script type="application/json"> element.
std::string script_json(const nlohmann::json& j) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";  // no "</script>" can end the element early
    } else {
      out += c;
    }
  }
  return out;
}

// "5 on the front", for a study of several objectives.
std::string front_size(const StudyView& s) {
  return std::to_string(s.front.size()) + " on the front";
}

// The numbers a study is judged by, as definition-list items with data-* for the tests.
std::string summary(const StudyView& s) {
  std::string best = "-";
  if (s.best)
    best = number(s.best->value) + " (trial " + std::to_string(s.best->trial) + ", step " +
           std::to_string(s.best->step) + ")";
  double progress = s.steps_unique > 0 ? static_cast<double>(s.steps_trained) / s.steps_unique : 0;
  std::string out =
      "<dl class=\"summary\" data-study=\"" + std::to_string(s.row.id) + "\" data-trials=\"" +
      std::to_string(s.trials.size()) + "\" data-closed=\"" + std::to_string(s.trials_closed) +
      "\" data-steps-trial-based=\"" + std::to_string(s.steps_trial_based) +
      "\" data-steps-unique=\"" + std::to_string(s.steps_unique) + "\" data-steps-trained=\"" +
      std::to_string(s.steps_trained) + "\" data-steps-executed=\"" +
      std::to_string(s.steps_executed) + "\" data-saving=\"" + fixed(s.saving(), 4) + "\">";
  auto item = [&](const std::string& term, const std::string& value, const std::string& cls) {
    out += "<div class=\"" + cls + "\"><dt>" + term + "</dt><dd>" + value + "</dd></div>";
  };
  item("status",
       "<span class=\"status " + std::string(to_string(s.row.status)) + "\">" +
           to_string(s.row.status) + "</span>" +
           (s.row.error.empty() ? "" : " " + escape(s.row.error)),
       "status-item");
  item("trials", std::to_string(s.trials_closed) + " closed of " + std::to_string(s.trials.size()),
       "trials");
  if (s.goals.several()) {
    std::string objectives, trials;
    for (const Objective& o : s.goals.objectives)
      objectives +=
          (objectives.empty() ? "" : ", ") + escape(o.metric) + (o.maximize ? " (max)" : " (min)");
    // The first few by number; the table's pareto column has them all.
    constexpr size_t kNamed = 20;
    for (size_t i = 0; i < std::min(kNamed, s.front.size()); ++i)
      trials += (i == 0 ? ": trials " : ", ") + std::to_string(s.front[i]);
    if (s.front.size() > kNamed) trials += ", …";
    item("Pareto front of " + objectives, front_size(s) + trials, "best");
  } else {
    item("best " + escape(s.metric) + (s.maximize ? " (max)" : " (min)"), best, "best");
  }
  item("steps trial-based / unique / executed",
       std::to_string(s.steps_trial_based) + " / " + std::to_string(s.steps_unique) + " / " +
           std::to_string(s.steps_executed),
       "steps");
  item("saving",
       s.steps_unique > 0 ? "<span class=\"saving\">" + fixed(s.saving(), 2) + "×</span>" : "-",
       "saving-item");
  item("wall time", duration(s.wall_s), "wall");
  item("trained",
       "<progress class=\"progress\" max=\"1\" value=\"" + fixed(progress, 4) + "\"></progress> " +
           std::to_string(s.steps_trained) + " of " + std::to_string(s.steps_unique) + " steps",
       "progress-item");
  return out + "</dl>";
}

std::string nav(const StudyView& s, const std::string& here) {
  std::string out = "<nav class=\"study-nav\">";
  const std::pair<const char*, std::string> links[] = {
      {"study", study_link(s)},
      {"stage tree", study_link(s, "/tree")},
      {"timeline", study_link(s, "/timeline")},
      {"report (one file)", "/report/" + std::to_string(s.row.id)}};
  for (const auto& [name, href] : links)
    out += here == name ? "<strong>" + std::string(name) + "</strong>"
                        : "<a href=\"" + href + "\">" + name + "</a>";
  return out + "</nav>";
}

// The trial table: `page` (table_page's JSON) rendered by dashboard.js at once; on the dashboard
// (`source`: the URL of /study/ID/trials) it asks the server for other pages, in the report
// (`source` empty) it pages the whole table, which comes compressed (compressed_table).
std::string trial_table_section(const StudyView& s, const TrialTable& table,
                                const std::string& source) {
  TableQuery query = default_query(table);
  std::string out =
      "<section class=\"table\"><h2>Trials</h2><div class=\"trial-table\" data-rows=\"" +
      std::to_string(s.trials.size()) + "\"" +
      (source.empty() ? "" : " data-source=\"" + escape(source) + "\"") +
      "><noscript>The table needs JavaScript.</noscript></div>"
      "<script type=\"application/json\" class=\"trial-data\">" +
      script_json(table_page(table, query)) + "</script>";
  if (source.empty())
    out += "<script type=\"application/octet-stream\" class=\"trial-archive\">" +
           compressed_table(table) + "</script>";
  return out + "</section>";
}

// A part of a page that the live page keeps when it has not changed (pages.h, without_parts):
// its content's hash names it.
std::string part(const std::string& html) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : html) hash = (hash ^ c) * 1099511628211ULL;
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(hash));
  return std::string("<div class=\"part\" data-part=\"") + name + "\">" + html + kPartEnd;
}

std::string figure(const std::string& title, const std::string& svg, const std::string& note = "") {
  return part("<figure><figcaption>" + title + "</figcaption>" + svg +
              (note.empty() ? "" : "<p class=\"note\">" + note + "</p>") + "</figure>");
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "<ul class=\"legend\">";
  for (const auto& [cls, text] : items)
    out += "<li><span class=\"swatch " + cls + "\"></span>" + text + "</li>";
  return out + "</ul>";
}

// "; " and a drawing's note, or nothing.
std::string and_drawing(const Drawing& d, const std::string& goal) {
  const std::string note = drawing_note(d, goal);
  return note.empty() ? "" : "; " + note;
}

// In place of the optimization history of one objective: the front of the first two objectives,
// and how its hypervolume grew.
std::string front_figures(const StudyView& s, const Drawing& d) {
  const size_t objectives = s.goals.objectives.size();
  size_t diverged = 0, not_finite = 0;
  for (const TrialView& t : s.trials) {
    diverged += t.row.status == TrialStatus::kDiverged;
    if (t.result && t.row.status != TrialStatus::kDiverged &&
        !std::all_of(t.result->values.begin(), t.result->values.end(),
                     [](double v) { return std::isfinite(v); }))
      ++not_finite;
  }
  std::string note =
      "a dot per trial at its last evaluation that has every goal metric; on the front: "
      "feasible, and no feasible trial is as good in every objective and better in one; the "
      "line is the edge of what the front of these two objectives dominates";
  if (objectives > 2)
    note += "; these are the first two of " + std::to_string(objectives) +
            " objectives: filled dots are optimal in all of them";
  if (diverged > 0) note += "; " + std::to_string(diverged) + " diverged trials are not drawn";
  if (not_finite > 0)
    note += "; " + std::to_string(not_finite) +
            " trials with an objective NaN or infinite are not drawn";
  return figure("Pareto front",
                legend({{"front", "on the front"},
                        {"feasible", "feasible, dominated"},
                        {"infeasible", "infeasible (a constraint fails)"},
                        {"failed", "failed"}}) +
                    pareto_svg(s, d),
                note + and_drawing(d, "")) +
         figure("Hypervolume", hypervolume_svg(s),
                "of the front of trials 1 to N, by trial number; the reference point, the same "
                "for every N, is each objective's worst feasible value moved a tenth of its "
                "range further");
}

std::string study_figures(const StudyView& s, const Drawing& d) {
  std::string out = "<div class=\"figures\">";
  // Values that are not finite have no place on an axis: said, not drawn.
  const std::string left_out = s.not_finite > 0 ? "; " + std::to_string(s.not_finite) +
                                                      " evaluations of " + escape(s.metric) +
                                                      " were NaN or infinite and are not drawn"
                                                : "";
  const std::string summarized = and_drawing(d, s.goals.several() ? "" : s.metric);
  if (s.goals.several()) {
    out += front_figures(s, d);
  } else {
    const std::string note = left_out + summarized;
    out += figure("Optimization history", history_svg(s, d), note.empty() ? "" : note.substr(2));
  }
  out += figure("Learning curves (" + escape(s.metric) + ")", curves_svg(s, d),
                (d.summarized ? "the median (line) and the 10-90% band of the other trials' "
                                "values per 5 pixels of steps; the trials drawn one by one "
                                "over them"
                              : "one line per trial; trials that share stages coincide up to "
                                "their divergence") +
                    left_out + summarized);
  out += figure("Parallel coordinates", parallel_svg(s, d),
                summarized.empty() ? "" : summarized.substr(2));
  out += figure("Parameter importance", importance_svg(s, d),
                "the share of the variance of " + escape(s.metric) +
                    " (each trial's best) that each parameter alone explains: between bins of "
                    "the parameter (10 of equal counts, or its categories), less what chance "
                    "gives; fANOVA's first-order term, from the trials themselves");
  out += "</div><h2>Slices</h2><div class=\"slices\">";
  for (const auto& [name, svg] : slice_svgs(s, d)) out += figure(escape(name), svg);
  return out + "</div>";
}

std::string tree_section(const StudyView& s, const Drawing& d, const TreeExpansion& e = {}) {
  size_t trained = 0;
  for (const StageView& st : s.stages) trained += st.state == StageState::kTrained;
  const size_t left_out = tree_stages_drawn(s, d, e).left_out;
  const std::string paths = "the critical path and the paths of the top " +
                            std::to_string(d.top.size()) +
                            " trials, the front and the selected trials";
  std::string how;
  if (s.stages.size() > kMaxStagesDrawn && !e.expanded()) {
    how = " Collapsed past " + std::to_string(kMaxStagesDrawn) + " stages: drawn are " + paths +
          " (select one with ?trial=N, or jump to it in the study's table); the band under "
          "them counts the other stages at each step.";
  } else if (s.stages.size() > kMaxStagesDrawn) {
    how = " Expanded " +
          (e.below ? "below stage " + std::to_string(*e.below) : std::string("from the top")) +
          ": drawn are " + paths + ", then the stages nearest " +
          (e.below ? "that stage" : "the top") + " first, at most " + std::to_string(e.limit) +
          " stages in all.";
  }
  return "<p>" + std::to_string(s.stages.size()) + " stages (" + std::to_string(trained) +
         " trained) along the step axis; a branch is where trials diverge. Hover or select a "
         "stage for its trials, steps and checkpoints." +
         how + "</p>" +
         (left_out > 0
              ? "<p class=\"note tree-limit\" data-left-out=\"" + std::to_string(left_out) + "\">" +
                    std::to_string(left_out) +
                    " stages not shown (an expanded tree draws at most " + std::to_string(e.limit) +
                    " stages; the band under it counts the others at each step); "
                    "narrow with <em>expand below stage</em> (hover a stage for its number) or "
                    "<em>draw the path of trial</em>.</p>"
              : "") +
         legend({{"trained", "trained"},
                 {"training", "training"},
                 {"pending", "pending"},
                 {"pruned", "pruned (no running trial needs it)"},
                 {"checkpoint", "checkpoint"}}) +
         figure("Stage tree", tree_svg(s, d, e)) +
         "<div class=\"stage-details\" aria-live=\"polite\"></div>";
}

// Where each worker's time went over the study's wall time (storage/time_split.h): seconds per
// part, and the parts' shares of all workers' time.
std::string time_split_table(const StudyView& s) {
  const TimeSplit split = split_time(s.executions, s.wall_s);
  if (split.workers.empty()) return "";
  std::string out =
      "<h2>Where each worker's time went</h2><p>Seconds of the study's wall time (" +
      duration(s.wall_s) +
      ") per worker: the parts its worker measured (trainer start, setup of data and model, "
      "loading the parent state, fetching it from another storage, training, evaluation, "
      "saving states), what no part names (other), the way to and from the master (dispatch), "
      "jobs that did not finish, and idle.</p><table "
      "class=\"time-split\"><thead><tr><th>worker</th>"
      "<th>jobs</th>";
  for (const char* part : kTimeParts) out += std::string("<th>") + part + "</th>";
  out += "</tr></thead><tbody>";
  const double all = split.all.total();
  auto row = [&](const WorkerTime& w, bool shares) {
    out += "<tr><td>" + escape(w.worker) + "</td><td>" + std::to_string(w.jobs) + "</td>";
    for (double seconds : w.seconds)
      out += "<td>" + fixed(seconds, 2) +
             (shares && all > 0 ? " (" + fixed(100 * seconds / all, 0) + "%)" : "") + "</td>";
    out += "</tr>";
  };
  // A row per worker up to kMaxWorkerRows (a thousand workers would be a page of their own),
  // then all of them together.
  constexpr size_t kMaxWorkerRows = 64;
  for (size_t i = 0; i < split.workers.size() && i < kMaxWorkerRows; ++i)
    row(split.workers[i], false);
  row(split.all, true);
  out += "</tbody></table>";
  if (split.workers.size() > kMaxWorkerRows)
    out += "<p class=\"note\">The first " + std::to_string(kMaxWorkerRows) + " of " +
           std::to_string(split.workers.size()) + " workers, and all of them in the last row.</p>";
  return out;
}

std::string timeline_section(const StudyView& s) {
  const bool aggregated = s.executions.size() > kMaxExecutionsDrawn;
  return "<p>What each worker ran when: " + std::to_string(s.executions.size()) +
         " executions; blank is idle." +
         (aggregated ? " Past " + std::to_string(kMaxExecutionsDrawn) +
                           " executions, each lane (a worker, or a group of workers past 100) is "
                           "shaded by how busy it was in each of 100 spans of time, darker is "
                           "busier; the bars drawn are those that trained the critical path (the "
                           "longest trial, " +
                           std::to_string(s.critical_path_steps) + " steps).</p>"
                     : " Outlined bars trained stages on the critical path (the longest trial, " +
                           std::to_string(s.critical_path_steps) + " steps).</p>") +
         legend({{"train", "train"},
                 {"replay", "replay (rebuilding a lost state)"},
                 {"evaluate", "evaluate"},
                 {"failed", "failed, lost or abandoned"}}) +
         figure("Timeline", timeline_svg(s)) + time_split_table(s);
}

}  // namespace

std::string content_security_policy(bool live) {
  return "default-src 'none'; script-src 'sha256-" + hex_to_base64(kScriptSha256) +
         "'; style-src 'sha256-" + hex_to_base64(kStyleSha256) + "'; img-src data:; connect-src " +
         (live ? "'self'" : "'none'") + "; base-uri 'none'; form-action " +
         (live ? "'self'" : "'none'");
}

Page studies_page(const PlanView& plan) {
  Page p{"hippo: studies", ""};
  std::string& out = p.content;
  out = "<h1>Studies</h1>";
  if (plan.studies.empty()) {
    out += "<p class=\"empty\">No studies in this search plan yet.</p>";
    return p;
  }
  out +=
      "<form action=\"/compare\" method=\"get\"><table "
      "class=\"studies\"><thead><tr><th>compare</th>"
      "<th>id</th><th>name</th><th>status</th><th>policy</th><th>trials</th><th>best</th>"
      "<th>steps trial-based</th><th>unique</th><th>executed</th><th>saving</th><th>wall "
      "time</th><th>trained</th></tr></thead><tbody>";
  for (const auto& sp : plan.studies) {
    const StudyView& s = *sp;
    double progress =
        s.steps_unique > 0 ? static_cast<double>(s.steps_trained) / s.steps_unique : 0;
    out += "<tr class=\"study\" data-study=\"" + std::to_string(s.row.id) + "\" data-saving=\"" +
           fixed(s.saving(), 4) +
           "\"><td><input type=\"checkbox\" "
           "name=\"id\" value=\"" +
           std::to_string(s.row.id) + "\" aria-label=\"compare " + escape(s.row.name) +
           "\"></td><td>" + std::to_string(s.row.id) + "</td><td><a href=\"" + study_link(s) +
           "\">" + escape(s.row.name) + "</a></td><td><span class=\"status " +
           to_string(s.row.status) + "\">" + to_string(s.row.status) + "</span></td><td>" +
           to_string(s.row.policy) + "</td><td>" + std::to_string(s.trials_closed) + "/" +
           std::to_string(s.trials.size()) + "</td><td>" +
           (s.goals.several() ? front_size(s)
            : s.best          ? escape(s.metric) + " " + number(s.best->value)
                              : "-") +
           "</td><td>" + std::to_string(s.steps_trial_based) + "</td><td>" +
           std::to_string(s.steps_unique) + "</td><td>" + std::to_string(s.steps_executed) +
           "</td><td class=\"saving\">" + (s.steps_unique > 0 ? fixed(s.saving(), 2) + "×" : "-") +
           "</td><td>" + duration(s.wall_s) + "</td><td><progress max=\"1\" value=\"" +
           fixed(progress, 4) + "\"></progress></td></tr>";
  }
  out += "</tbody></table><button type=\"submit\">Compare selected studies</button></form>";
  return p;
}

Page compare_page(const std::vector<const StudyView*>& studies) {
  Page p{"hippo: compare", "<h1>Studies side by side</h1><div class=\"compare\">"};
  for (const StudyView* s : studies)
    p.content += "<section class=\"compared\"><h2><a href=\"" + study_link(*s) + "\">" +
                 escape(s->row.name) + "</a></h2>" + summary(*s) + "</section>";
  p.content += "</div>" + figure("Best so far", compare_svg(studies));
  return p;
}

Page study_page(const StudyView& s, const std::vector<int64_t>& selected) {
  const Drawing d = drawing_of(s, selected);
  Page p{"hippo: " + s.row.name, ""};
  std::string chosen;
  for (int64_t n : d.selected) chosen += (chosen.empty() ? "" : ", ") + std::to_string(n);
  p.content = "<h1>Study " + escape(s.row.name) + "</h1>" + nav(s, "study") + part(summary(s)) +
              (chosen.empty() ? ""
                              : "<p class=\"selected-note\">Selected: trial " + chosen +
                                    " (drawn one by one in every figure)</p>") +
              study_figures(s, d) +
              part(trial_table_section(s, trial_table(s, *d.params), study_link(s, "/trials")));
  return p;
}

namespace {

// The query of a tree page that selects `trials` and expands as `expand` says ("all", a stage's
// number, or "" for collapsed), as a link's href ("?" alone: the collapsed tree, nothing
// selected) or as a form's hidden inputs.
std::string tree_query(const std::vector<int64_t>& trials, const std::string& expand) {
  std::string query = "?";
  for (int64_t t : trials) {
    if (query.size() > 1) query += '&';
    query += "trial=";
    query += std::to_string(t);
  }
  if (!expand.empty()) {
    if (query.size() > 1) query += '&';
    query += "expand=";
    query += expand;
  }
  return query;
}
std::string hidden_inputs(const std::vector<int64_t>& trials, const std::string& expand) {
  std::string out;
  for (int64_t t : trials)
    out += "<input type=\"hidden\" name=\"trial\" value=\"" + std::to_string(t) + "\">";
  if (!expand.empty())
    out += "<input type=\"hidden\" name=\"expand\" value=\"" + escape(expand) + "\">";
  return out;
}

}  // namespace

Page tree_page(const StudyView& s, const std::vector<int64_t>& selected,
               const TreeExpansion& expansion) {
  // A collapsed tree expands along the paths of the trials asked for, and from its top or below
  // a stage as far as kMaxStagesExpanded: plain links and forms (GET), so that they work without
  // the script, and the live page polls the URL they make.
  std::string controls;
  if (s.stages.size() > kMaxStagesDrawn) {
    const std::string expand = expansion.below ? std::to_string(*expansion.below)
                               : expansion.all ? "all"
                                               : "";
    controls =
        "<div class=\"tree-controls\"><form class=\"select-trial\" method=\"get\"><label>draw "
        "the path of trial <input type=\"number\" name=\"trial\" min=\"1\"></label>" +
        hidden_inputs({}, expand) +
        " <button>draw</button></form><form class=\"expand-tree\" method=\"get\">" +
        (expansion.all ? "<strong>expanded</strong>"
                       : "<a class=\"expand-all\" href=\"" + escape(tree_query(selected, "all")) +
                             "\">expand all</a>") +
        " · <label>expand below stage <input type=\"number\" name=\"expand\" min=\"0\"></label>" +
        hidden_inputs(selected, "") + " <button>expand</button>" +
        (expansion.expanded() ? " · <a class=\"collapse\" href=\"" +
                                    escape(tree_query(selected, "")) + "\">collapse</a>"
                              : "") +
        "</form></div>";
  }
  return {"hippo: " + s.row.name + " stage tree",
          "<h1>Stage tree of " + escape(s.row.name) + "</h1>" + nav(s, "stage tree") +
              part(summary(s)) + controls + tree_section(s, drawing_of(s, selected), expansion)};
}

Page timeline_page(const StudyView& s) {
  return {"hippo: " + s.row.name + " timeline", "<h1>Timeline of " + escape(s.row.name) + "</h1>" +
                                                    nav(s, "timeline") + part(summary(s)) +
                                                    timeline_section(s)};
}

std::string without_parts(const std::string& content, const std::set<std::string>& kept) {
  static const std::string open = "<div class=\"part\" data-part=\"";
  std::string out;
  size_t at = 0;
  for (size_t start = content.find(open); start != std::string::npos;
       start = content.find(open, at)) {
    const size_t name_at = start + open.size();
    const std::string name = content.substr(name_at, 16);
    const size_t end = content.find(kPartEnd, name_at);
    if (end == std::string::npos) break;
    out.append(content, at, start - at);
    if (kept.count(name)) {
      out += open + name + "\" data-kept=\"1\">" + kPartEnd;
    } else {
      out.append(content, start, end + std::strlen(kPartEnd) - start);
    }
    at = end + std::strlen(kPartEnd);
  }
  out.append(content, at, std::string::npos);
  return out;
}

Page error_page(int status, const std::string& message) {
  return {"hippo: " + std::to_string(status), "<h1>" + std::to_string(status) +
                                                  "</h1><p class=\"error\">" + escape(message) +
                                                  "</p><p><a href=\"/\">All studies</a></p>"};
}

std::string document(const Page& page, bool live, const std::string& version) {
  return "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"" +
         content_security_policy(live) +
         "\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>" +
         escape(page.title) + "</title><style>" + std::string(kStyle) +
         "</style></head><body data-live=\"" + (live ? "1" : "0") +
         "\"><header><a class=\"home\" href=\"" + (live ? "/" : "#") +
         "\">hippo</a><span class=\"live-state\"></span></header><main id=\"content\" "
         "data-version=\"" +
         escape(version) + "\">" + page.content + "</main><script>" + std::string(kScript) +
         "</script></body></html>";
}

std::string report(const StudyView& s) {
  char when[64] = "";
  std::time_t t = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  Page p{"hippo report: " + s.row.name, ""};
  const Drawing d = drawing_of(s);
  p.content = "<h1>Study " + escape(s.row.name) + "</h1><p class=\"note\">Report written " + when +
              " by hippo from the search plan; this file needs no network.</p>" + summary(s) +
              study_figures(s, d) + "<h2>Stage tree</h2>" + tree_section(s, d) +
              "<h2>Timeline</h2>" + timeline_section(s) +
              trial_table_section(s, trial_table(s, *d.params), "");
  return document(p, false, "report");
}

}  // namespace hippo::dashboard
