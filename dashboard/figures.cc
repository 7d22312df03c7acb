#include "dashboard/figures.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "dashboard/scale.h"
#include "dashboard/summary.h"
#include "searchers/pareto.h"

namespace hippo::dashboard {
namespace {

constexpr double kWidth = 720, kHeight = 300;
constexpr double kWideWidth = 1100;  // the tree and the timeline
constexpr double kLeft = 60, kRight = 16, kTop = 14, kBottom = 36;

// Status and state colours (also in dashboard.css's legend).
const char* status_colour(TrialStatus s) {
  // pending, running, done, stopped, failed, diverged
  static const char* const colours[] = {"#b8b8b8", "#ee854a", "#4878d0",
                                        "#8c8c8c", "#d65f5f", "#956cb4"};
  return colours[static_cast<int>(s)];
}
const char* state_colour(StageState s) {
  static const char* const colours[] = {"#4878d0", "#ee854a", "#d0d0d0", "#f2f2f2"};
  return colours[static_cast<int>(s)];
}
const char* kind_colour(ExecutionKind k) {
  static const char* const colours[] = {"#4878d0", "#956cb4", "#6acc64"};
  return colours[static_cast<int>(k)];
}
// Eight steps of viridis, worst to best.
const char* value_colour(int bin) {
  static const char* const colours[] = {"#440154", "#46327e", "#365c8d", "#277f8e",
                                        "#1fa187", "#4ac16d", "#a0da39", "#fde725"};
  return colours[std::clamp(bin, 0, 7)];
}

// Fixed-point text for coordinates (one decimal is finer than a pixel).
void coord(std::string& out, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  out += buf;
}

std::string open_svg(const std::string& cls, double width, double height,
                     const std::string& attributes = "") {
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"" + cls +
                    "\" viewBox=\"0 0 " + number(width) + " " + number(height) + "\"";
  if (!attributes.empty()) out += " " + attributes;
  out += ">";
  return out;
}

// Axes with ticks and labels around the plot area of a kWidth x kHeight figure.
void axes(std::string& out, const Scale& x, const Scale& y, const std::string& x_label,
          const std::string& y_label) {
  out += "<g class=\"axes\">";
  for (double v : ticks(y, 5)) {
    out += "<line class=\"grid\" x1=\"" + number(kLeft) + "\" x2=\"" + number(kWidth - kRight) +
           "\" y1=\"";
    coord(out, y(v));
    out += "\" y2=\"";
    coord(out, y(v));
    out += "\"/><text x=\"" + number(kLeft - 6) + "\" y=\"";
    coord(out, y(v) + 4);
    out += "\" text-anchor=\"end\">" + number(v) + "</text>";
  }
  for (double v : ticks(x, 6)) {
    out += "<text x=\"";
    coord(out, x(v));
    out += "\" y=\"" + number(kHeight - kBottom + 16) + "\" text-anchor=\"middle\">" + number(v) +
           "</text>";
  }
  out += "<line class=\"axis\" x1=\"" + number(kLeft) + "\" x2=\"" + number(kLeft) + "\" y1=\"" +
         number(kTop) + "\" y2=\"" + number(kHeight - kBottom) + "\"/>";
  out += "<line class=\"axis\" x1=\"" + number(kLeft) + "\" x2=\"" + number(kWidth - kRight) +
         "\" y1=\"" + number(kHeight - kBottom) + "\" y2=\"" + number(kHeight - kBottom) + "\"/>";
  out += "<text class=\"label\" x=\"" + number((kLeft + kWidth - kRight) / 2) + "\" y=\"" +
         number(kHeight - 4) + "\" text-anchor=\"middle\">" + escape(x_label) + "</text>";
  out += "<text class=\"label\" transform=\"translate(12," +
         number((kTop + kHeight - kBottom) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         escape(y_label) + "</text></g>";
}

// The x axis of a kWideWidth x height figure (the tree, the timeline): a grid line and a label per
// tick over the plot, and the axis's name centred under the plot from `left` to the right edge.
void wide_x_axis(std::string& out, const Scale& x, double left, double height,
                 const std::string& label) {
  out += "<g class=\"axes\">";
  for (double v : ticks(x, 6)) {
    out += "<line class=\"grid\" x1=\"";
    coord(out, x(v));
    out += "\" x2=\"";
    coord(out, x(v));
    out += "\" y1=\"" + number(kTop) + "\" y2=\"" + number(height - kBottom) + "\"/><text x=\"";
    coord(out, x(v));
    out += "\" y=\"" + number(height - kBottom + 16) + "\" text-anchor=\"middle\">" + number(v) +
           "</text>";
  }
  out += "<text class=\"label\" x=\"" + number((left + kWideWidth) / 2) + "\" y=\"" +
         number(height - 4) + "\" text-anchor=\"middle\">" + escape(label) + "</text></g>";
}

std::string empty_svg(const std::string& cls, const std::string& message) {
  return open_svg(cls + " empty", kWidth, 60) + "<text x=\"" + number(kWidth / 2) +
         "\" y=\"34\" text-anchor=\"middle\">" + escape(message) + "</text></svg>";
}

// Dots as one path of zero-length round-capped segments: one element for any number of points,
// and one dot per half pixel (ten thousand trials on a few parameter values draw a few dozen).
void dots(std::string& out, std::vector<std::pair<double, double>> points,
          const std::string& attributes) {
  if (points.empty()) return;
  for (auto& [x, y] : points) {
    x = std::round(x * 2) / 2;
    y = std::round(y * 2) / 2;
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  out += "<path class=\"dots\" " + attributes + " d=\"";
  for (const auto& [x, y] : points) {
    out += "M";
    coord(out, x);
    out += " ";
    coord(out, y);
    out += "h0";
  }
  out += "\"/>";
}

// One mark that stands for a row of the plan: a circle with its data-* attributes and a <title>
// (already escaped).
void mark(std::string& out, double cx, double cy, double r, const std::string& attributes,
          const std::string& title) {
  out += "<circle " + attributes + " cx=\"";
  coord(out, cx);
  out += "\" cy=\"";
  coord(out, cy);
  out += "\" r=\"" + number(r) + "\"><title>" + title + "</title></circle>";
}

// A best-so-far line through points (pixels, by x): across to each next point, then up or down
// to its value.
std::string step_line(const std::vector<std::pair<double, double>>& points) {
  std::string d;
  for (size_t i = 0; i < points.size(); ++i) {
    d += i == 0 ? "M" : "H";
    coord(d, points[i].first);
    d += i == 0 ? " " : "V";
    coord(d, points[i].second);
  }
  return d;
}

// The edge of what a front of two objectives dominates, through its points (pixels, from the one
// worst in x to the one best in x, so each next one is worse in y): from the worse x edge of the
// plot across to the first point, down to each next point's y and across to it, then on to the
// worse y edge.
std::string dominated_edge(const std::vector<std::pair<double, double>>& front, double worse_x,
                           double worse_y) {
  std::string d = "M";
  coord(d, worse_x);
  d += " ";
  coord(d, front.front().second);
  for (const auto& [px, py] : front) {
    d += "V";
    coord(d, py);
    d += "H";
    coord(d, px);
  }
  d += "V";
  coord(d, worse_y);
  return d;
}

std::string objective_label(const Objective& o) {
  return o.metric + (o.maximize ? " (max)" : " (min)");
}

// The range of the trials' values of the metric (each trial's best, or every point).
std::pair<double, double> value_range(const StudyView& study, bool every_point) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const TrialView& t : study.trials) {
    if (every_point) {
      for (const auto& [step, v] : t.curve) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    } else if (t.best) {
      lo = std::min(lo, *t.best);
      hi = std::max(hi, *t.best);
    }
  }
  return {lo, hi};
}

// The drawing's parameter columns, if it has them for this study (a drawing made by hand has
// none; one of another study, columns of another length).
const std::vector<ParamColumn>* drawn_params(const StudyView& study, const Drawing& drawing) {
  const auto& p = drawing.params;
  return p && (p->empty() || p->front().values.size() == study.trials.size()) ? p.get() : nullptr;
}

// The parameters some trial has, in the spec's order: each a column of every trial's value (the
// drawing's, when it has them).
std::vector<const ParamColumn*> parameters(const StudyView& study, const Drawing& drawing,
                                           std::vector<ParamColumn>& own) {
  const std::vector<ParamColumn>* drawn = drawn_params(study, drawing);
  if (!drawn) own = param_columns(study);
  std::vector<const ParamColumn*> out;
  for (const ParamColumn& column : drawn ? *drawn : own)
    if (column.present) out.push_back(&column);
  return out;
}

// A parameter's axis: numeric values on a linear or log scale, others as evenly spaced categories.
struct ParamAxis {
  std::string name;
  bool numeric = true;
  Scale scale;
  std::vector<std::string> categories;  // sorted, for non-numeric
  // Where the trial at an index in the column falls on the axis, if it has a value.
  std::optional<double> position(const ParamColumn& column, size_t trial) const;
  double category_position(size_t category) const;
};

std::string category_of(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::optional<double> ParamAxis::position(const ParamColumn& column, size_t trial) const {
  if (!column.values[trial]) return std::nullopt;
  if (numeric) return scale(*column.numbers[trial]);
  auto it =
      std::lower_bound(categories.begin(), categories.end(), category_of(*column.values[trial]));
  if (it == categories.end()) return std::nullopt;
  return category_position(static_cast<size_t>(it - categories.begin()));
}

double ParamAxis::category_position(size_t category) const {
  double i = static_cast<double>(category);
  double n = static_cast<double>(categories.size());
  return scale.from + (i + 0.5) / n * (scale.to - scale.from);
}

ParamAxis param_axis(const ParamColumn& column, double from, double to) {
  ParamAxis a;
  a.name = column.name;
  a.numeric = column.all_numbers;
  std::set<std::string> categories;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (size_t i = 0; i < column.values.size(); ++i) {
    if (!column.values[i]) continue;
    if (a.numeric) {
      lo = std::min(lo, *column.numbers[i]);
      hi = std::max(hi, *column.numbers[i]);
    } else {
      categories.insert(category_of(*column.values[i]));
    }
  }
  a.scale = fit(lo, hi, from, to, true);
  a.categories.assign(categories.begin(), categories.end());
  return a;
}

// Tick labels of a parameter axis.
std::vector<std::pair<double, std::string>> axis_labels(const ParamAxis& a) {
  std::vector<std::pair<double, std::string>> out;
  if (a.numeric) {
    for (double v : ticks(a.scale, 4)) out.emplace_back(a.scale(v), number(v));
  } else {
    // At most about 30 labels, however many categories.
    const size_t every = (a.categories.size() + 29) / 30;
    for (size_t i = 0; i < a.categories.size(); i += every)
      out.emplace_back(a.category_position(i), a.categories[i]);
  }
  return out;
}

// "1,2,3"; past 50 numbers, the first 50 and how many more ("1,2,...,50,+9950").
std::string joined(const std::vector<int64_t>& numbers) {
  std::string out;
  for (size_t i = 0; i < numbers.size() && i < 50; ++i) {
    if (!out.empty()) out += ',';
    out += std::to_string(numbers[i]);
  }
  if (numbers.size() > 50) out += ",+" + std::to_string(numbers.size() - 50);
  return out;
}

// Which of the eight colours a value gets: 0 the worst, 7 the best.
int value_bin(double v, const Scale& s, bool maximize) {
  double f = std::clamp(s.fraction(v), 0.0, 1.0);
  if (!maximize) f = 1 - f;
  return static_cast<int>(std::floor(f * 7.999));
}

// A rectangle as a path's subpath.
void rectangle(std::string& d, double x, double y, double width, double height) {
  d += "M";
  coord(d, x);
  d += " ";
  coord(d, y);
  d += "h";
  coord(d, width);
  d += "v";
  coord(d, height);
  d += "h";
  coord(d, -width);
  d += "z";
}

// Shades of one colour for cells of a grid (rows of `columns` levels, -1 for none): a path per
// level, and neighbouring cells of a row at the same level as one rectangle (a dense area is a
// few long runs, not a cell each).
void shades(std::string& out, const std::vector<std::vector<int>>& levels, int count, double left,
            double top, double width, double height, const std::string& attributes,
            const std::function<std::string(int)>& opacity) {
  std::vector<std::string> paths(static_cast<size_t>(count));
  for (size_t r = 0; r < levels.size(); ++r) {
    const std::vector<int>& row = levels[r];
    for (size_t c = 0; c < row.size();) {
      size_t end = c + 1;
      while (end < row.size() && row[end] == row[c]) ++end;
      if (row[c] >= 0)
        rectangle(paths[static_cast<size_t>(row[c])], left + width * static_cast<double>(c),
                  top + height * static_cast<double>(r), width * static_cast<double>(end - c),
                  height);
      c = end;
    }
  }
  for (int level = 0; level < count; ++level)
    if (!paths[static_cast<size_t>(level)].empty())
      out += "<path " + attributes + " fill-opacity=\"" + opacity(level) + "\" d=\"" +
             paths[static_cast<size_t>(level)] + "\"/>";
}

// The shades of a density: six levels of opacity by the log of the count (so that one trial
// alone still shows). The group says how many points it counts.
void draw_density(std::string& out, const Density& density, const char* colour) {
  constexpr int kLevels = 6;
  const double most = std::log1p(static_cast<double>(density.most()));
  std::vector<std::vector<int>> levels(
      static_cast<size_t>(density.rows()),
      std::vector<int>(static_cast<size_t>(density.columns()), -1));
  for (int r = 0; r < density.rows(); ++r)
    for (int c = 0; c < density.columns(); ++c)
      if (const int64_t n = density.count(c, r))
        levels[static_cast<size_t>(r)][static_cast<size_t>(c)] =
            std::clamp(static_cast<int>(std::log1p(static_cast<double>(n)) / most * kLevels - 1e-9),
                       0, kLevels - 1);
  out += "<g class=\"density\" data-count=\"" + std::to_string(density.total()) + "\">";
  shades(out, levels, kLevels, density.x(0), density.y(0), density.cell(), density.cell(),
         "fill=\"" + std::string(colour) + "\"",
         [](int level) { return number(0.15 + 0.8 * level / (kLevels - 1)); });
  out += "</g>";
}

// A box of pixels: where a figure's points may fall.
struct Box {
  double left, top, right, bottom;
};

// The points of the trials that are not drawn one by one: every one as a dot, or, when the study
// is summarized, their counts per cell. Returns the figure's attributes that say which.
std::string rest_points(std::string& out, const Drawing& drawing,
                        const std::vector<std::pair<double, double>>& points, const Box& box,
                        const char* colour) {
  if (!drawing.summarized) {
    dots(out, points, "stroke=\"" + std::string(colour) + "\"");
    return "data-dots=\"" + std::to_string(points.size()) + "\"";
  }
  Density density(box.left, box.top, box.right, box.bottom, 6);
  for (const auto& [x, y] : points) density.add(x, y);
  draw_density(out, density, colour);
  return "data-binned=\"" + std::to_string(density.total()) + "\"";
}

// A trial drawn one by one: a circle with its number, its role (top, front, selected, extreme)
// and a <title>.
void exact_mark(std::string& out, const Drawing& drawing, int64_t number, double cx, double cy,
                const std::string& title) {
  const std::string role = drawing.role(number);
  mark(out, cx, cy, role == "selected" ? 5.5 : 3.5,
       "class=\"trial exact\" data-role=\"" + role + "\" data-trial=\"" + std::to_string(number) +
           "\"",
       title);
}

// What a figure draws, as its first attributes: the trials it covers and how many one by one.
std::string drawn_attributes(const Drawing& drawing, size_t exact) {
  return "data-trials=\"" + std::to_string(drawing.trials) + "\" data-exact=\"" +
         std::to_string(exact) + "\" data-summarized=\"" + (drawing.summarized ? "1" : "0") + "\"";
}

std::string trial_title(const StudyView& study, const TrialView& t, double value) {
  return "trial " + std::to_string(t.row.number) + ": " + escape(study.metric) + " " +
         number(value);
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string drawing_note(const Drawing& drawing, const std::string& goal) {
  if (!drawing.summarized) return "";
  const std::string top = std::to_string(drawing.top.size());
  return std::to_string(drawing.trials) + " trials: " +
         (goal.empty() ? "the " + top + " trials of the Pareto front"
                       : "the top " + top + " by " + escape(goal)) +
         ", the selected trials and the least and most of each axis are drawn one by one (" +
         std::to_string(drawing.exact.size()) +
         " in all); the others as a density (their counts in cells of 6 pixels: darker is more)";
}

std::string history_svg(const StudyView& study, const Drawing& drawing) {
  auto [lo, hi] = value_range(study, false);
  if (!(lo <= hi)) return empty_svg("history", "no value of " + study.metric + " yet");
  Scale x = fit(1, std::max<double>(1, static_cast<double>(study.trials.size())), kLeft + 6,
                kWidth - kRight - 6);
  Scale y = fit(lo, hi, kHeight - kBottom - 6, kTop + 6);
  std::string body;
  axes(body, x, y, "trial", study.metric + " (each trial's best)");
  std::vector<std::pair<double, double>> rest, best_so_far;
  std::vector<const TrialView*> exact;
  std::optional<double> best;
  for (const TrialView& t : study.trials) {
    if (!t.best) continue;
    double px = x(static_cast<double>(t.row.number));
    if (drawing.exact.count(t.row.number)) {
      exact.push_back(&t);
    } else {
      rest.emplace_back(px, y(*t.best));
    }
    // The line turns only where the best changes (and ends at the last trial).
    if (!best || (study.maximize ? *t.best > *best : *t.best < *best)) {
      best = t.best;
      best_so_far.emplace_back(px, y(*best));
    }
  }
  if (best) best_so_far.emplace_back(x(static_cast<double>(study.trials.size())), y(*best));
  const std::string how = rest_points(body, drawing, rest,
                                      {kLeft, kTop, kWidth - kRight, kHeight - kBottom}, "#4878d0");
  body += "<path class=\"best-line\" d=\"" + step_line(best_so_far) + "\"/>";
  for (const TrialView* t : exact)
    exact_mark(body, drawing, t->row.number, x(static_cast<double>(t->row.number)), y(*t->best),
               trial_title(study, *t, *t->best));
  body +=
      "<title>" + escape(study.metric) + ": each trial's best (dots), best so far (line)</title>";
  return open_svg("history", kWidth, kHeight, drawn_attributes(drawing, exact.size()) + " " + how) +
         body + "</svg>";
}

// A curve as one path: at most two points (min and max) per pixel column, in step order, and
// always the last.
void curve_path(std::string& out, const std::vector<std::pair<int64_t, double>>& curve,
                const Scale& x, const Scale& y) {
  const size_t columns = static_cast<size_t>(kWidth - kLeft - kRight);
  const size_t n = curve.size();
  const size_t per_column = n > 2 * columns ? (n + columns - 1) / columns : 1;
  bool first = true;
  auto emit = [&](const std::pair<int64_t, double>& p) {
    out += first ? "M" : "L";
    first = false;
    coord(out, x(static_cast<double>(p.first)));
    out += " ";
    coord(out, y(p.second));
  };
  for (size_t i = 0; i < n; i += per_column) {
    size_t end = std::min(n, i + per_column), lo_i = i, hi_i = i;
    for (size_t j = i; j < end; ++j) {
      if (curve[j].second < curve[lo_i].second) lo_i = j;
      if (curve[j].second > curve[hi_i].second) hi_i = j;
    }
    emit(curve[std::min(lo_i, hi_i)]);
    if (lo_i != hi_i) emit(curve[std::max(lo_i, hi_i)]);
  }
  if (n == 1) {
    out += "h0";  // a single evaluation: a dot
  } else if ((n - 1) % per_column != 0) {
    emit(curve.back());
  }
}

// The curves of the trials not drawn one by one, summarized: per column of 5 pixels of steps,
// the median of their values there and the band from the 10th to the 90th percentile.
std::string curve_bands(std::string& out, const StudyView& study, const Drawing& drawing,
                        const Scale& x, const Scale& y) {
  constexpr double kColumn = 5;
  const size_t columns = static_cast<size_t>((kWidth - kLeft - kRight) / kColumn) + 1;
  std::vector<std::vector<double>> values(columns);
  size_t trials = 0;
  for (const TrialView& t : study.trials) {
    if (t.curve.empty() || drawing.exact.count(t.row.number)) continue;
    ++trials;
    for (const auto& [step, v] : t.curve) {
      const double c = std::clamp(std::floor((x(static_cast<double>(step)) - kLeft) / kColumn), 0.0,
                                  static_cast<double>(columns - 1));
      values[static_cast<size_t>(c)].push_back(v);
    }
  }
  std::vector<std::array<double, 4>> band;  // x, 10%, 50%, 90% (pixels)
  for (size_t c = 0; c < columns; ++c) {
    if (values[c].empty()) continue;
    band.push_back({kLeft + (static_cast<double>(c) + 0.5) * kColumn, y(quantile(values[c], 0.1)),
                    y(quantile(values[c], 0.5)), y(quantile(values[c], 0.9))});
  }
  if (!band.empty()) {
    out += "<path class=\"band\" d=\"";
    for (size_t i = 0; i < band.size(); ++i) {
      out += i == 0 ? "M" : "L";
      coord(out, band[i][0]);
      out += " ";
      coord(out, band[i][1]);
    }
    for (size_t i = band.size(); i-- > 0;) {
      out += "L";
      coord(out, band[i][0]);
      out += " ";
      coord(out, band[i][3]);
    }
    out += "Z\"/><path class=\"median\" d=\"";
    for (size_t i = 0; i < band.size(); ++i) {
      out += i == 0 ? "M" : "L";
      coord(out, band[i][0]);
      out += " ";
      coord(out, band[i][2]);
    }
    out += "\"/>";
  }
  return "data-banded=\"" + std::to_string(trials) + "\"";
}

std::string curves_svg(const StudyView& study, const Drawing& drawing) {
  auto [lo, hi] = value_range(study, true);
  if (!(lo <= hi)) return empty_svg("curves", "no value of " + study.metric + " yet");
  int64_t last_step = 1;
  for (const TrialView& t : study.trials)
    if (!t.curve.empty()) last_step = std::max(last_step, t.curve.back().first);
  Scale x = fit(0, static_cast<double>(last_step), kLeft, kWidth - kRight);
  Scale y = fit(lo, hi, kHeight - kBottom - 4, kTop + 4);
  std::string body;
  axes(body, x, y, "step", study.metric);
  std::string how = drawing.summarized ? curve_bands(body, study, drawing, x, y) : "";
  // Drawn one by one: every curve, or when summarized the exact trials' over the bands.
  size_t exact = 0;
  for (const TrialView& t : study.trials) {
    if (t.curve.empty()) continue;
    const bool one_by_one = drawing.exact.count(t.row.number) != 0;
    if (drawing.summarized && !one_by_one) continue;
    exact += one_by_one;
    // No <title> per curve (ten thousand of them weigh): dashboard.js names the one hovered.
    body += "<path class=\"curve\" data-trial=\"" + std::to_string(t.row.number) + "\"" +
            (one_by_one ? " data-role=\"" + std::string(drawing.role(t.row.number)) + "\"" : "") +
            " stroke=\"" + status_colour(t.row.status) + "\" d=\"";
    curve_path(body, t.curve, x, y);
    body += "\"/>";
  }
  return open_svg("curves", kWidth, kHeight, drawn_attributes(drawing, exact) + " " + how) + body +
         "</svg>";
}

std::string parallel_svg(const StudyView& study, const Drawing& drawing) {
  std::vector<ParamColumn> own;
  const std::vector<const ParamColumn*> params = parameters(study, drawing, own);
  auto [lo, hi] = value_range(study, false);
  if (params.empty() || !(lo <= hi))
    return empty_svg("parallel", params.empty() ? "no parameters" : "no values yet");
  const double axes_n = static_cast<double>(params.size() + 1);
  const double left = 70, right = kWidth - 70, top = 28, bottom = kHeight - 20;
  auto axis_x = [&](size_t i) {
    return left + (right - left) * static_cast<double>(i) / (axes_n - 1);
  };
  std::vector<ParamAxis> axes_list;
  for (const ParamColumn* column : params) axes_list.push_back(param_axis(*column, bottom, top));
  Scale metric = fit(lo, hi, bottom, top);
  // A trial's line: its position on each axis it has a value for, then the metric's.
  auto positions = [&](const TrialView& t) {
    const size_t index = static_cast<size_t>(&t - study.trials.data());
    std::vector<std::pair<double, double>> out;
    for (size_t i = 0; i < axes_list.size(); ++i)
      if (std::optional<double> py = axes_list[i].position(*params[i], index))
        out.emplace_back(axis_x(i), *py);
    out.emplace_back(axis_x(axes_list.size()), metric(*t.best));
    return out;
  };
  auto polyline = [](std::string& d, const std::vector<std::pair<double, double>>& points) {
    for (size_t i = 0; i < points.size(); ++i) {
      d += i == 0 ? "M" : "L";
      coord(d, points[i].first);
      d += " ";
      coord(d, points[i].second);
    }
  };
  std::string body, how;
  if (!drawing.summarized) {
    // One path per colour: any number of trials in eight elements.
    std::string lines[8];
    size_t drawn = 0;
    for (const TrialView& t : study.trials) {
      if (!t.best || drawing.exact.count(t.row.number)) continue;
      polyline(lines[value_bin(*t.best, metric, study.maximize)], positions(t));
      ++drawn;
    }
    for (int b = 0; b < 8; ++b)
      if (!lines[b].empty())
        body += "<path class=\"lines\" stroke=\"" + std::string(value_colour(b)) + "\" d=\"" +
                lines[b] + "\"/>";
    how = "data-lines=\"" + std::to_string(drawn) + "\"";
  } else {
    // Between each pair of neighbouring axes, the segments binned by where they leave and where
    // they arrive (24 bins an axis), drawn once per bin pair with an opacity by its count.
    constexpr int kBins = 24;
    std::map<std::tuple<double, int, int>, int64_t> segments;  // (left x, from bin, to bin)
    auto bin = [&](double py) {
      return std::clamp(static_cast<int>((py - top) / (bottom - top) * kBins), 0, kBins - 1);
    };
    size_t binned = 0;
    for (const TrialView& t : study.trials) {
      if (!t.best || drawing.exact.count(t.row.number)) continue;
      ++binned;
      const auto points = positions(t);
      for (size_t i = 1; i < points.size(); ++i)
        ++segments[{points[i - 1].first, bin(points[i - 1].second), bin(points[i].second)}];
    }
    int64_t most = 1;
    for (const auto& [key, n] : segments) most = std::max(most, n);
    constexpr int kLevels = 6;
    std::string paths[kLevels];
    const double gap = (right - left) / (axes_n - 1), cell = (bottom - top) / kBins;
    for (const auto& [key, n] : segments) {
      const auto& [x0, from, to] = key;
      const int level =
          std::clamp(static_cast<int>(std::log1p(static_cast<double>(n)) /
                                          std::log1p(static_cast<double>(most)) * kLevels -
                                      1e-9),
                     0, kLevels - 1);
      polyline(paths[level],
               {{x0, top + (from + 0.5) * cell}, {x0 + gap, top + (to + 0.5) * cell}});
    }
    body += "<g class=\"density\" data-count=\"" + std::to_string(binned) + "\">";
    for (int level = 0; level < kLevels; ++level)
      if (!paths[level].empty())
        body += "<path class=\"lines\" stroke=\"#365c8d\" stroke-opacity=\"" +
                number(0.08 + 0.7 * level / (kLevels - 1)) + "\" d=\"" + paths[level] + "\"/>";
    body += "</g>";
    how = "data-binned=\"" + std::to_string(binned) + "\"";
  }
  size_t exact = 0;
  for (const TrialView& t : study.trials) {
    if (!t.best || !drawing.exact.count(t.row.number)) continue;
    ++exact;
    body += "<path class=\"line exact\" data-trial=\"" + std::to_string(t.row.number) +
            "\" data-role=\"" + drawing.role(t.row.number) + "\" stroke=\"" +
            value_colour(value_bin(*t.best, metric, study.maximize)) + "\" d=\"";
    polyline(body, positions(t));
    body += "\"><title>" + trial_title(study, t, *t.best) + "</title></path>";
  }
  auto draw_axis = [&](size_t i, const std::string& name,
                       const std::vector<std::pair<double, std::string>>& labels) {
    double ax = axis_x(i);
    body += "<g class=\"axes\"><line class=\"axis\" x1=\"" + number(ax) + "\" x2=\"" + number(ax) +
            "\" y1=\"" + number(top) + "\" y2=\"" + number(bottom) + "\"/>";
    body += "<text class=\"label\" x=\"" + number(ax) + "\" y=\"14\" text-anchor=\"middle\">" +
            escape(name) + "</text>";
    for (const auto& [py, text] : labels) {
      body += "<text x=\"" + number(ax + 4) + "\" y=\"";
      coord(body, py + 4);
      body += "\">" + escape(text) + "</text>";
    }
    body += "</g>";
  };
  for (size_t i = 0; i < axes_list.size(); ++i)
    draw_axis(i, axes_list[i].name, axis_labels(axes_list[i]));
  std::vector<std::pair<double, std::string>> metric_labels;
  for (double v : ticks(metric, 4)) metric_labels.emplace_back(metric(v), number(v));
  draw_axis(axes_list.size(), study.metric, metric_labels);
  return open_svg("parallel", kWidth, kHeight, drawn_attributes(drawing, exact) + " " + how) +
         body + "</svg>";
}

std::vector<std::pair<std::string, std::string>> slice_svgs(const StudyView& study,
                                                            const Drawing& drawing) {
  std::vector<std::pair<std::string, std::string>> out;
  auto [lo, hi] = value_range(study, false);
  if (!(lo <= hi)) return out;
  const double width = 340, height = 220, left = 52, bottom = 34, top = 10, right = 12;
  std::vector<ParamColumn> own;
  for (const ParamColumn* c : parameters(study, drawing, own)) {
    const ParamColumn& column = *c;
    const std::string& name = column.name;
    ParamAxis a = param_axis(column, left + 6, width - right - 6);
    Scale y = fit(lo, hi, height - bottom - 4, top + 4);
    std::string body = "<g class=\"axes\">";
    for (double v : ticks(y, 4)) {
      body += "<text x=\"" + number(left - 5) + "\" y=\"";
      coord(body, y(v) + 4);
      body += "\" text-anchor=\"end\">" + number(v) + "</text>";
    }
    for (const auto& [px, text] : axis_labels(a)) {
      body += "<text x=\"";
      coord(body, px);
      body += "\" y=\"" + number(height - bottom + 15) + "\" text-anchor=\"middle\">" +
              escape(text) + "</text>";
    }
    body += "<line class=\"axis\" x1=\"" + number(left) + "\" x2=\"" + number(left) + "\" y1=\"" +
            number(top) + "\" y2=\"" + number(height - bottom) + "\"/><line class=\"axis\" x1=\"" +
            number(left) + "\" x2=\"" + number(width - right) + "\" y1=\"" +
            number(height - bottom) + "\" y2=\"" + number(height - bottom) + "\"/>";
    body += "<text class=\"label\" x=\"" + number((left + width) / 2) + "\" y=\"" +
            number(height - 3) + "\" text-anchor=\"middle\">" + escape(name) + "</text></g>";
    std::vector<std::pair<double, double>> rest;
    std::vector<std::tuple<const TrialView*, double, double>> exact;
    for (size_t i = 0; i < study.trials.size(); ++i) {
      const TrialView& t = study.trials[i];
      std::optional<double> px = a.position(column, i);
      if (!t.best || !px) continue;
      if (drawing.exact.count(t.row.number)) {
        exact.emplace_back(&t, *px, y(*t.best));
      } else {
        rest.emplace_back(*px, y(*t.best));
      }
    }
    const std::string how =
        rest_points(body, drawing, rest, {left, top, width - right, height - bottom}, "#4878d0");
    for (const auto& [t, px, py] : exact)
      exact_mark(body, drawing, t->row.number, px, py, trial_title(study, *t, *t->best));
    out.emplace_back(name, open_svg("slice", width, height,
                                    "data-param=\"" + escape(name) + "\" " +
                                        drawn_attributes(drawing, exact.size()) + " " + how) +
                               body + "</svg>");
  }
  return out;
}

std::string importance_svg(const StudyView& study, const Drawing& drawing) {
  const std::vector<ParamColumn>* drawn = drawn_params(study, drawing);
  const std::vector<Importance> list = drawn ? importances(study, *drawn) : importances(study);
  if (list.empty()) return empty_svg("importance", "no parameters with values yet");
  const double row = 22, left = 160, right = kWidth - 60, top = 8;
  const double height = top + row * static_cast<double>(list.size()) + 8;
  std::string out = open_svg("importance", kWidth, height);
  for (size_t i = 0; i < list.size(); ++i) {
    const Importance& m = list[i];
    const double y = top + row * static_cast<double>(i);
    out += "<g class=\"importance\" data-param=\"" + escape(m.parameter) + "\" data-share=\"" +
           number(m.share) + "\"><text x=\"" + number(left - 6) + "\" y=\"" + number(y + 15) +
           "\" text-anchor=\"end\">" + escape(m.parameter) + "</text><rect x=\"" + number(left) +
           "\" y=\"" + number(y + 3) + "\" width=\"";
    coord(out, std::max(1.0, m.share * (right - left)));
    out += "\" height=\"" + number(row - 6) + "\"/><text x=\"";
    coord(out, left + std::max(1.0, m.share * (right - left)) + 6);
    out += "\" y=\"" + number(y + 15) + "\">" + number(m.share) + "</text><title>" +
           escape(m.parameter) + ": " + number(100 * m.share) + "% of the variance of " +
           escape(study.metric) + " over " + std::to_string(m.trials) + " trials</title></g>";
  }
  return out + "</svg>";
}

TreeDrawn tree_stages_drawn(const StudyView& study, const Drawing& drawing,
                            const TreeExpansion& expansion) {
  const size_t n = study.stages.size();
  std::unordered_map<StageId, size_t> position;
  for (size_t i = 0; i < n; ++i) position[study.stages[i].stage.id] = i;
  std::optional<size_t> below;
  if (expansion.below) {
    auto at = position.find(*expansion.below);
    if (at == position.end())
      throw std::out_of_range("no stage " + std::to_string(*expansion.below) + " in study " +
                              study.row.name);
    below = at->second;
  }
  TreeDrawn t;
  if (n <= kMaxStagesDrawn) {
    t.drawn.assign(n, true);
    t.shown = n;
    return t;
  }
  // Collapsed: the critical path and the paths of the trials drawn one by one (the top ones, the
  // front, the selected); the others are counted per step under them.
  t.drawn.assign(n, false);
  auto draw_path = [&](size_t i) {  // a stage and its ancestors
    for (auto at = position.find(study.stages[i].stage.id);
         at != position.end() && !t.drawn[at->second];
         at = position.find(study.stages[at->second].stage.parent)) {
      t.drawn[at->second] = true;
      ++t.shown;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const StageView& s = study.stages[i];
    bool keep = s.on_critical_path;
    for (int64_t number : s.trials_ending)
      keep = keep || (drawing.exact.count(number) && !drawing.extremes.count(number));
    if (keep) draw_path(i);
  }
  if (!expansion.expanded()) return t;
  // Expanded: breadth first from the top stages (or the stage asked for, after its path) while
  // under the limit; past it, the stages reached are counted.
  std::deque<size_t> todo;
  if (below) {
    draw_path(*below);
    todo.push_back(*below);
  } else {
    for (size_t i = 0; i < n; ++i)
      if (!position.count(study.stages[i].stage.parent)) todo.push_back(i);
  }
  for (; !todo.empty(); todo.pop_front()) {
    const size_t i = todo.front();
    if (!t.drawn[i]) {
      if (t.shown < expansion.limit) {
        t.drawn[i] = true;
        ++t.shown;
      } else {
        ++t.left_out;
      }
    }
    for (StageId child : study.stages[i].stage.children) {
      auto at = position.find(child);
      if (at != position.end()) todo.push_back(at->second);
    }
  }
  return t;
}

std::string tree_svg(const StudyView& study, const Drawing& drawing,
                     const TreeExpansion& expansion) {
  if (study.stages.empty()) return empty_svg("tree", "no stages yet");
  std::unordered_map<StageId, size_t> position;
  for (size_t i = 0; i < study.stages.size(); ++i) position[study.stages[i].stage.id] = i;
  const std::vector<bool> drawn = tree_stages_drawn(study, drawing, expansion).drawn;
  // Some stages not drawn: they are counted per step under the others.
  const bool collapsed = std::find(drawn.begin(), drawn.end(), false) != drawn.end();
  // Rows: a stage shares the row of its first drawn child; every other child opens a new row.
  std::unordered_map<StageId, size_t> row;
  size_t rows = 0, shown = 0;
  int64_t last_step = 1;
  for (size_t i = 0; i < study.stages.size(); ++i) {  // parents come before their children
    const StageView& s = study.stages[i];
    last_step = std::max(last_step, s.stage.end);
    if (!drawn[i]) continue;
    ++shown;
    auto parent = position.find(s.stage.parent);
    bool first_child = false;
    if (parent != position.end()) {
      for (StageId c : study.stages[parent->second].stage.children) {
        auto child = position.find(c);
        if (child != position.end() && drawn[child->second]) {
          first_child = c == s.stage.id;
          break;
        }
      }
    }
    row[s.stage.id] = first_child ? row[s.stage.parent] : rows++;
  }
  const double row_h =
      std::clamp(560.0 / static_cast<double>(std::max<size_t>(rows, 1)), 3.0, 22.0);
  constexpr double kBand = 70;  // the collapsed stages' counts, under the rows
  const double band_top = kTop + row_h * static_cast<double>(rows) + 6;
  const double height = band_top + (collapsed ? kBand : 0) + kBottom - 6;
  Scale x = fit(0, static_cast<double>(last_step), kLeft, kWideWidth - kRight);
  auto y = [&](StageId id) { return kTop + row_h * (static_cast<double>(row.at(id)) + 0.5); };
  std::string out = open_svg("tree", kWideWidth, height,
                             "data-stages=\"" + std::to_string(study.stages.size()) +
                                 "\" data-drawn=\"" + std::to_string(shown) + "\"");
  wide_x_axis(out, x, kLeft, height, "step");
  if (collapsed) {
    // How many of the stages not drawn cover each step (columns of 4 pixels), as an area.
    constexpr double kColumn = 4;
    const size_t columns = static_cast<size_t>((kWideWidth - kRight - kLeft) / kColumn) + 1;
    std::vector<int64_t> cover(columns + 1, 0);  // differences, then running sums
    for (size_t i = 0; i < study.stages.size(); ++i) {
      if (drawn[i]) continue;
      auto column = [&](int64_t step) {
        return static_cast<size_t>(
            std::clamp(std::floor((x(static_cast<double>(step)) - kLeft) / kColumn), 0.0,
                       static_cast<double>(columns - 1)));
      };
      ++cover[column(study.stages[i].stage.start)];
      --cover[column(study.stages[i].stage.end) + 1];
    }
    int64_t most = 1, running = 0;
    for (int64_t& c : cover) {
      running += c;
      c = running;
      most = std::max(most, running);
    }
    out += "<path class=\"collapsed\" data-count=\"" + std::to_string(study.stages.size() - shown) +
           "\" d=\"M" + number(kLeft) + " " + number(band_top + kBand);
    for (size_t c = 0; c < columns; ++c) {
      out += "L";
      coord(out, kLeft + kColumn * static_cast<double>(c));
      out += " ";
      coord(out,
            band_top + kBand - kBand * static_cast<double>(cover[c]) / static_cast<double>(most));
    }
    out += "L" + number(kWideWidth - kRight) + " " + number(band_top + kBand) + "Z\"><title>" +
           std::to_string(study.stages.size() - shown) +
           " stages not drawn: how many cover each step (at most " + std::to_string(most) +
           ")</title></path>";
  }
  // Branches: from the parent's row at its end down to the child's row.
  out += "<path class=\"branches\" d=\"";
  for (const StageView& s : study.stages) {
    if (!row.count(s.stage.id) || !row.count(s.stage.parent) ||
        row[s.stage.parent] == row[s.stage.id])
      continue;
    out += "M";
    coord(out, x(static_cast<double>(s.stage.start)));
    out += " ";
    coord(out, y(s.stage.parent));
    out += "V";
    coord(out, y(s.stage.id));
  }
  out += "\"/>";
  const double box_h = std::max(2.0, row_h * 0.72);
  for (const StageView& s : study.stages) {
    if (!row.count(s.stage.id)) continue;
    const Stage& st = s.stage;
    const std::string trials = joined(s.trials_ending), checkpoints = joined(s.checkpoints);
    double x0 = x(static_cast<double>(st.start)), x1 = x(static_cast<double>(st.end));
    double xt = x(static_cast<double>(std::clamp(st.trained_until, st.start, st.end)));
    double top = y(st.id) - box_h / 2;
    out += "<g class=\"stage" + std::string(s.on_critical_path ? " critical" : "") +
           "\" data-stage=\"" + std::to_string(st.id) + "\" data-state=\"" + to_string(s.state) +
           "\" data-start=\"" + std::to_string(st.start) + "\" data-end=\"" +
           std::to_string(st.end) + "\" data-trained=\"" + std::to_string(st.trained_until) +
           "\" data-through=\"" + std::to_string(s.trials_through) + "\" data-trials=\"" + trials +
           "\" data-checkpoints=\"" + checkpoints + "\">";
    // Its number shows on hover without the script too (what "expand below stage" asks for).
    out += "<title>stage " + std::to_string(st.id) + ": steps [" + std::to_string(st.start) +
           ", " + std::to_string(st.end) + ")</title>";
    out += "<rect x=\"";
    coord(out, x0);
    out += "\" y=\"";
    coord(out, top);
    out += "\" width=\"";
    coord(out, std::max(1.0, x1 - x0));
    out += "\" height=\"";
    coord(out, box_h);
    out += "\" fill=\"" + std::string(state_colour(s.state)) + "\"/>";
    // A stage trained as far as its trials are still wanted, the rest asked for and then not
    // needed (its trials were stopped): that rest is drawn pruned.
    if (s.state == StageState::kTrained && st.trained_until < st.end) {
      double xn = x(static_cast<double>(std::max(s.needed_end, st.trained_until)));
      out += "<rect class=\"pruned-part\" x=\"";
      coord(out, xn);
      out += "\" y=\"";
      coord(out, top);
      out += "\" width=\"";
      coord(out, std::max(0.0, x1 - xn));
      out += "\" height=\"";
      coord(out, box_h);
      out += "\" fill=\"" + std::string(state_colour(StageState::kPruned)) + "\"/>";
    }
    if (xt > x0 && s.state != StageState::kTrained) {
      out += "<rect class=\"trained\" x=\"";
      coord(out, x0);
      out += "\" y=\"";
      coord(out, top);
      out += "\" width=\"";
      coord(out, xt - x0);
      out += "\" height=\"";
      coord(out, box_h);
      out += "\"/>";
    }
    for (int64_t c : s.checkpoints) {
      out += "<path class=\"checkpoint\" d=\"M";
      coord(out, x(static_cast<double>(c)));
      out += " ";
      coord(out, top);
      out += "v";
      coord(out, box_h);
      out += "\"/>";
    }
    out += "</g>";
  }
  return out + "</svg>";
}

namespace {

// The timeline of a study with more executions than kMaxExecutionsDrawn: per lane (a worker, or a
// group of workers when they are more than kMaxLanes), how busy it was in each of 100 spans of
// time, as shades; the executions that trained the critical path drawn over them one by one.
std::string busy_timeline_svg(const StudyView& study) {
  constexpr size_t kMaxLanes = 100, kSpans = 100;
  std::map<std::string, size_t> workers;
  double t0 = study.executions.front().started_at, t1 = t0;
  for (const ExecutionRow& e : study.executions) {
    workers.emplace(e.worker, 0);
    t0 = std::min(t0, e.started_at);
    t1 = std::max(t1, e.ended_at);
  }
  const size_t per_lane = (workers.size() + kMaxLanes - 1) / kMaxLanes;
  size_t index = 0;
  for (auto& [worker, lane] : workers) lane = index++ / per_lane;
  const size_t lanes = (workers.size() + per_lane - 1) / per_lane;
  std::set<StageId> critical;
  for (const StageView& s : study.stages)
    if (s.on_critical_path) critical.insert(s.stage.id);
  const double left = 150, lane_h = std::clamp(560.0 / static_cast<double>(lanes), 4.0, 26.0);
  const double height = kTop + lane_h * static_cast<double>(lanes) + kBottom;
  const double span_s = std::max(1e-3, t1 - t0) / kSpans;
  Scale x = fit(0, std::max(1e-3, t1 - t0), left, kWideWidth - kRight);
  // Busy seconds per lane and span: each execution spread over the spans it overlaps.
  std::vector<double> busy(lanes * kSpans, 0);
  for (const ExecutionRow& e : study.executions) {
    const size_t lane = workers[e.worker];
    const double a = e.started_at - t0, b = std::max(a, e.ended_at - t0);
    const size_t first = std::min(kSpans - 1, static_cast<size_t>(std::max(0.0, a / span_s)));
    const size_t last = std::min(kSpans - 1, static_cast<size_t>(std::max(0.0, b / span_s)));
    for (size_t k = first; k <= last; ++k) {
      const double from = std::max(a, span_s * static_cast<double>(k));
      const double to = std::min(b, span_s * static_cast<double>(k + 1));
      busy[lane * kSpans + k] += std::max(0.0, to - from);
    }
  }
  std::string out =
      open_svg("timeline busy", kWideWidth, height,
               "data-executions=\"" + std::to_string(study.executions.size()) +
                   "\" data-workers=\"" + std::to_string(workers.size()) + "\" data-lanes=\"" +
                   std::to_string(lanes) + "\" data-span=\"" + number(t1 - t0) + "\"");
  wide_x_axis(out, x, left, height, "seconds since the first execution");
  constexpr int kLevels = 6;
  const double span_px = (kWideWidth - kRight - left) / kSpans;
  std::vector<std::vector<int>> levels(lanes, std::vector<int>(kSpans, -1));
  for (size_t lane = 0; lane < lanes; ++lane) {
    const double top = kTop + lane_h * static_cast<double>(lane);
    const size_t members = std::min(per_lane, workers.size() - lane * per_lane);
    for (size_t k = 0; k < kSpans; ++k) {
      const double share = busy[lane * kSpans + k] / (span_s * static_cast<double>(members));
      if (share > 0)
        levels[lane][k] = std::clamp(static_cast<int>(share * kLevels), 0, kLevels - 1);
    }
    if (lanes <= 40 || lane % (lanes / 20) == 0) {
      const auto first = std::next(workers.begin(), static_cast<std::ptrdiff_t>(lane * per_lane));
      out += "<text x=\"" + number(left - 6) + "\" y=\"" + number(top + lane_h / 2 + 4) +
             "\" text-anchor=\"end\">" + escape(first->first) +
             (members > 1 ? " +" + std::to_string(members - 1) : "") + "</text>";
    }
  }
  shades(out, levels, kLevels, left, kTop, span_px, lane_h, "class=\"busy\" fill=\"#4878d0\"",
         [](int level) { return number((level + 1.0) / kLevels); });
  for (const ExecutionRow& e : study.executions) {
    if (e.kind == ExecutionKind::kEvaluate || !critical.count(e.stage)) continue;
    const double top = kTop + lane_h * static_cast<double>(workers[e.worker]);
    const double x0 = x(e.started_at - t0), x1 = x(e.ended_at - t0);
    out += "<rect class=\"execution critical\" data-stage=\"" + std::to_string(e.stage) + "\" x=\"";
    coord(out, x0);
    out += "\" y=\"";
    coord(out, top + 1);
    out += "\" width=\"";
    coord(out, std::max(1.0, x1 - x0));
    out += "\" height=\"";
    coord(out, std::max(1.0, lane_h - 2));
    out += "\"><title>" + std::string(to_string(e.kind)) + " stage " + std::to_string(e.stage) +
           " on " + escape(e.worker) + ", steps [" + std::to_string(e.from) + ", " +
           std::to_string(e.to) + ")</title></rect>";
  }
  return out + "</svg>";
}

}  // namespace

std::string timeline_svg(const StudyView& study) {
  if (study.executions.size() > kMaxExecutionsDrawn) return busy_timeline_svg(study);
  if (study.executions.empty()) return empty_svg("timeline", "no executions recorded yet");
  std::map<std::string, std::vector<const ExecutionRow*>> lanes;
  double t0 = study.executions.front().started_at, t1 = t0;
  for (const ExecutionRow& e : study.executions) {
    lanes[e.worker].push_back(&e);
    t0 = std::min(t0, e.started_at);
    t1 = std::max(t1, e.ended_at);
  }
  std::unordered_map<TrialId, int64_t> numbers;
  for (const TrialView& t : study.trials) numbers[t.row.id] = t.row.number;
  std::set<StageId> critical;
  for (const StageView& s : study.stages)
    if (s.on_critical_path) critical.insert(s.stage.id);
  const double lane_h = 26, left = 150;
  const double height = kTop + lane_h * static_cast<double>(lanes.size()) + kBottom;
  Scale x = fit(0, std::max(1e-3, t1 - t0), left, kWideWidth - kRight);
  std::string out = open_svg("timeline", kWideWidth, height,
                             "data-executions=\"" + std::to_string(study.executions.size()) +
                                 "\" data-span=\"" + number(t1 - t0) + "\"");
  wide_x_axis(out, x, left, height, "seconds since the first execution");
  size_t lane = 0;
  for (const auto& [worker, executions] : lanes) {
    double top = kTop + lane_h * static_cast<double>(lane++);
    double busy = 0;
    for (const ExecutionRow* e : executions) busy += e->ended_at - e->started_at;
    double use = t1 > t0 ? busy / (t1 - t0) : 1;
    out += "<g class=\"lane\" data-worker=\"" + escape(worker) + "\" data-busy=\"" + number(use) +
           "\"><rect class=\"idle\" x=\"" + number(left) + "\" y=\"" + number(top + 3) +
           "\" width=\"" + number(kWideWidth - kRight - left) + "\" height=\"" +
           number(lane_h - 6) + "\"/><text x=\"" + number(left - 6) + "\" y=\"" +
           number(top + lane_h / 2 + 4) + "\" text-anchor=\"end\">" + escape(worker) + " " +
           std::to_string(static_cast<int>(std::lround(use * 100))) + "%</text>";
    for (const ExecutionRow* e : executions) {
      auto number_of = numbers.find(e->trial);
      std::string trial = number_of == numbers.end() ? "a trial of another study"
                                                     : "trial " + std::to_string(number_of->second);
      double x0 = x(e->started_at - t0), x1 = x(e->ended_at - t0);
      bool on_path = e->kind != ExecutionKind::kEvaluate && critical.count(e->stage);
      out += "<rect class=\"execution " + std::string(to_string(e->kind)) + " " +
             to_string(e->outcome) + (on_path ? " critical" : "") + "\" data-stage=\"" +
             std::to_string(e->stage) + "\" data-from=\"" + std::to_string(e->from) +
             "\" data-to=\"" + std::to_string(e->to) + "\" x=\"";
      coord(out, x0);
      out += "\" y=\"" + number(top + 3) + "\" width=\"";
      coord(out, std::max(1.0, x1 - x0));
      out += "\" height=\"" + number(lane_h - 6) + "\" fill=\"" + kind_colour(e->kind) +
             "\"><title>" + to_string(e->kind) + " " + trial + ", steps [" +
             std::to_string(e->from) + ", " + std::to_string(e->to) + ")" +
             (e->reached != e->to ? " reached " + std::to_string(e->reached) : "") + ", stage " +
             std::to_string(e->stage) + ", " + number(e->ended_at - e->started_at) + " s, " +
             to_string(e->outcome) + (e->error.empty() ? "" : ": " + escape(e->error)) +
             "</title></rect>";
    }
    out += "</g>";
  }
  return out + "</svg>";
}

std::string pareto_svg(const StudyView& study, const Drawing& drawing, size_t x_objective,
                       size_t y_objective) {
  const std::vector<Objective>& objectives = study.goals.objectives;
  if (std::max(x_objective, y_objective) >= objectives.size() || x_objective == y_objective)
    return empty_svg("pareto", "the front needs two objectives");
  const Objective &ox = objectives[x_objective], &oy = objectives[y_objective];
  std::vector<const TrialView*> drawn;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = x_hi;
  for (const TrialView& t : study.trials) {
    if (!t.result || t.row.status == TrialStatus::kDiverged) continue;
    const double vx = t.result->values[x_objective], vy = t.result->values[y_objective];
    if (!std::isfinite(vx) || !std::isfinite(vy)) continue;
    drawn.push_back(&t);
    x_lo = std::min(x_lo, vx);
    x_hi = std::max(x_hi, vx);
    y_lo = std::min(y_lo, vy);
    y_hi = std::max(y_hi, vy);
  }
  if (drawn.empty()) return empty_svg("pareto", "no trial has reported every goal metric yet");
  Scale x = fit(x_lo, x_hi, kLeft + 6, kWidth - kRight - 6);
  Scale y = fit(y_lo, y_hi, kHeight - kBottom - 6, kTop + 6);
  std::string out;
  axes(out, x, y, objective_label(ox), objective_label(oy));
  // Summarized: the trials not drawn one by one (the front always is) as a density, under them.
  std::string how = "data-dots=\"" + std::to_string(drawn.size()) + "\"";
  if (drawing.summarized) {
    Density density(kLeft, kTop, kWidth - kRight, kHeight - kBottom, 6);
    std::vector<const TrialView*> exact;
    for (const TrialView* t : drawn) {
      if (drawing.exact.count(t->row.number) || t->result->pareto_optimal) {
        exact.push_back(t);
      } else {
        density.add(x(t->result->values[x_objective]), y(t->result->values[y_objective]));
      }
    }
    draw_density(out, density, "#8c8c8c");
    how = "data-binned=\"" + std::to_string(density.total()) + "\"";
    drawn = std::move(exact);
  }

  // The front of this pair among the feasible results, ordered from the worst in x to the best.
  // It lies among the trials optimal in every objective (one better in x or y would be better
  // in the pair too), so only they are compared: the cost is the front's, not the study's.
  std::vector<ParetoPoint> pair;
  for (const TrialView* t : drawn)
    if (t->result->pareto_optimal)
      pair.push_back({{t->result->values[x_objective], t->result->values[y_objective]}, 0});
  std::vector<size_t> front = pareto_front(pair, {ox.maximize, oy.maximize});
  if (!front.empty()) {
    std::sort(front.begin(), front.end(), [&](size_t a, size_t b) {
      return better(pair[b].values[0], pair[a].values[0], ox.maximize);
    });
    std::vector<std::pair<double, double>> edge;
    for (size_t k : front) edge.emplace_back(x(pair[k].values[0]), y(pair[k].values[1]));
    out += "<path class=\"front-line\" d=\"" +
           dominated_edge(edge, ox.maximize ? kLeft : kWidth - kRight,
                          oy.maximize ? kHeight - kBottom : kTop) +
           "\"/>";
  }

  // Infeasible trials below, the optimal ones on top.
  auto layer = [](const GoalResult& r) { return r.pareto_optimal ? 2 : r.feasible ? 1 : 0; };
  for (int level : {0, 1, 2})
    for (const TrialView* t : drawn) {
      const GoalResult& r = *t->result;
      if (layer(r) != level) continue;
      const std::string number_text = std::to_string(t->row.number);
      std::string title = "trial " + number_text + ", step " + std::to_string(r.step) + ": ";
      for (size_t i = 0; i < objectives.size(); ++i)
        title += (i ? ", " : "") + escape(objectives[i].metric) + " " + number(r.values[i]);
      title += r.pareto_optimal ? "; feasible, on the front"
               : r.feasible     ? "; feasible, dominated"
                                : "; infeasible (violation " + number(r.violation) + ")";
      if (t->row.status == TrialStatus::kFailed) title += "; failed";
      const char* cls = r.pareto_optimal ? "front" : r.feasible ? "feasible" : "infeasible";
      const std::string role = drawing.role(t->row.number);
      mark(out, x(r.values[x_objective]), y(r.values[y_objective]), r.pareto_optimal ? 5.5 : 3.5,
           "class=\"trial " + std::string(cls) +
               (t->row.status == TrialStatus::kFailed ? " failed" : "") + "\" data-trial=\"" +
               number_text + "\"" + (role.empty() ? "" : " data-role=\"" + role + "\"") +
               " data-feasible=\"" + (r.feasible ? "1" : "0") + "\" data-pareto=\"" +
               (r.pareto_optimal ? "1" : "0") + "\"",
           title);
    }
  return open_svg("pareto", kWidth, kHeight,
                  "data-x=\"" + escape(ox.metric) + "\" data-y=\"" + escape(oy.metric) +
                      "\" data-front=\"" + std::to_string(study.front.size()) + "\" " +
                      drawn_attributes(drawing, drawn.size()) + " " + how) +
         out + "</svg>";
}

std::string hypervolume_svg(const StudyView& study) {
  const size_t objectives = study.goals.objectives.size();
  if (objectives > kMaxHypervolumeObjectives)
    return empty_svg("hypervolume", "the hypervolume is drawn for 2 or " +
                                        std::to_string(kMaxHypervolumeObjectives) +
                                        " objectives; this study has " +
                                        std::to_string(objectives));
  const HypervolumeHistory history = hypervolume_history(study);
  if (history.points.empty()) return empty_svg("hypervolume", "no feasible trial yet");
  // Objectives that span more than a double holds (1e308 beside -1e308) put the reference point,
  // and so every volume, at infinity: nothing to draw.
  if (!std::all_of(history.reference.begin(), history.reference.end(),
                   [](double v) { return std::isfinite(v); }) ||
      !std::isfinite(history.points.back().second))
    return empty_svg("hypervolume",
                     "the objectives' range is beyond a double's: the hypervolume is infinite");
  std::string reference;
  for (size_t i = 0; i < objectives; ++i)
    reference += (i ? ", " : "") + escape(study.goals.objectives[i].metric) + " " +
                 number(history.reference[i]);
  Scale x = fit(1, std::max<double>(1, static_cast<double>(study.trials.size())), kLeft + 6,
                kWidth - kRight - 6);
  // Never decreasing: from the first point's value to the last's.
  Scale y = fit(history.points.front().second, history.points.back().second, kHeight - kBottom - 6,
                kTop + 6);
  std::string out =
      open_svg("hypervolume", kWidth, kHeight, "data-reference=\"" + reference + "\"");
  axes(out, x, y, "trial", "hypervolume of the front so far");
  std::vector<std::pair<double, double>> line;
  for (const auto& [trial, volume] : history.points)
    line.emplace_back(x(static_cast<double>(trial)), y(volume));
  out += "<path class=\"hv-line\" d=\"" + step_line(line) + "\"/>";
  char exact[32];
  for (size_t i = 0; i < line.size(); ++i) {
    const auto& [trial, volume] = history.points[i];
    std::snprintf(exact, sizeof exact, "%.17g", volume);  // the tests compare it
    mark(out, line[i].first, line[i].second, 2.5,
         "class=\"hv\" data-trial=\"" + std::to_string(trial) + "\" data-hypervolume=\"" + exact +
             "\"",
         "trials 1 to " + std::to_string(trial) + ": hypervolume " + number(volume));
  }
  out += "<title>hypervolume of the feasible front, reference point " + reference + "</title>";
  return out + "</svg>";
}

std::string compare_svg(const std::vector<const StudyView*>& studies) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  size_t most = 1;
  for (const StudyView* s : studies) {
    auto [a, b] = value_range(*s, false);
    lo = std::min(lo, a);
    hi = std::max(hi, b);
    most = std::max(most, s->trials.size());
  }
  if (!(lo <= hi)) return empty_svg("compare", "no values yet");
  Scale x = fit(1, static_cast<double>(most), kLeft + 6, kWidth - kRight - 6);
  Scale y = fit(lo, hi, kHeight - kBottom - 6, kTop + 6);
  std::string out = open_svg("compare", kWidth, kHeight);
  axes(out, x, y, "trial", "best so far");
  static const char* const colours[] = {"#4878d0", "#ee854a", "#6acc64", "#d65f5f",
                                        "#956cb4", "#8c613c", "#dc7ec0", "#797979"};
  size_t i = 0;
  for (const StudyView* s : studies) {
    std::vector<std::pair<double, double>> best_so_far;
    std::optional<double> best;
    for (const TrialView& t : s->trials) {
      if (!t.best || (best && !(s->maximize ? *t.best > *best : *t.best < *best))) continue;
      best = t.best;
      best_so_far.emplace_back(x(static_cast<double>(t.row.number)), y(*best));
    }
    if (best) best_so_far.emplace_back(x(static_cast<double>(s->trials.size())), y(*best));
    out += "<path class=\"study-line\" data-study=\"" + std::to_string(s->row.id) + "\" stroke=\"" +
           colours[i++ % 8] + "\" d=\"" + step_line(best_so_far) + "\"><title>" +
           escape(s->row.name) + "</title></path>";
  }
  return out + "</svg>";
}

}  // namespace hippo::dashboard
