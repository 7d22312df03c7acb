#include "dashboard/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

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

// A linear (or log10) map from data to pixels.
struct Scale {
  double lo = 0, hi = 1, from = 0, to = 1;
  bool log = false;
  double operator()(double v) const {
    double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    double x = log ? std::log10(v) : v;
    if (b == a) return (from + to) / 2;
    return from + (x - a) / (b - a) * (to - from);
  }
};

Scale fit(double lo, double hi, double from, double to, bool allow_log = false) {
  Scale s;
  s.from = from;
  s.to = to;
  if (!(lo <= hi)) lo = hi = 0;  // no data (or NaN)
  s.log = allow_log && lo > 0 && hi / lo >= 100;
  if (lo == hi && !s.log) {
    double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  s.lo = lo;
  s.hi = hi;
  return s;
}

// About n round tick values within [lo, hi].
std::vector<double> ticks(const Scale& s, int n) {
  std::vector<double> out;
  if (s.log) {
    for (double p = std::floor(std::log10(s.lo)); p <= std::ceil(std::log10(s.hi)); ++p) {
      double v = std::pow(10.0, p);
      if (v >= s.lo * 0.999 && v <= s.hi * 1.001) out.push_back(v);
    }
    return out;
  }
  double span = s.hi - s.lo;
  if (!(span > 0)) return {s.lo};
  double raw = span / n, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * magnitude) {
      step = m * magnitude;
      break;
    }
  for (double v = std::ceil(s.lo / step) * step; v <= s.hi + step * 1e-9; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return out;
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

// Parameter names of the study, sorted; and whether each is numeric in every trial.
std::vector<std::pair<std::string, bool>> parameters(const StudyView& study) {
  std::map<std::string, bool> numeric;
  for (const TrialView& t : study.trials)
    if (t.row.params.is_object())
      for (const auto& [name, value] : t.row.params.items()) {
        auto [it, fresh] = numeric.emplace(name, value.is_number());
        if (!fresh) it->second = it->second && value.is_number();
      }
  return {numeric.begin(), numeric.end()};
}

// A parameter's axis: numeric values on a linear or log scale, others as evenly spaced categories.
struct ParamAxis {
  std::string name;
  bool numeric = true;
  Scale scale;
  std::vector<std::string> categories;  // sorted, for non-numeric
  std::optional<double> position(const nlohmann::json& params) const;
};

std::string category_of(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::optional<double> ParamAxis::position(const nlohmann::json& params) const {
  if (!params.is_object() || !params.contains(name)) return std::nullopt;
  const nlohmann::json& v = params[name];
  if (numeric) return scale(v.get<double>());
  auto it = std::lower_bound(categories.begin(), categories.end(), category_of(v));
  if (it == categories.end()) return std::nullopt;
  double i = static_cast<double>(it - categories.begin());
  double n = static_cast<double>(categories.size());
  return scale.from + (i + 0.5) / n * (scale.to - scale.from);
}

ParamAxis param_axis(const StudyView& study, const std::string& name, bool numeric, double from,
                     double to) {
  ParamAxis a;
  a.name = name;
  a.numeric = numeric;
  std::set<std::string> categories;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const TrialView& t : study.trials) {
    if (!t.row.params.is_object() || !t.row.params.contains(name)) continue;
    const nlohmann::json& v = t.row.params[name];
    if (numeric) {
      lo = std::min(lo, v.get<double>());
      hi = std::max(hi, v.get<double>());
    } else {
      categories.insert(category_of(v));
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
    for (const std::string& c : a.categories) out.emplace_back(*a.position({{a.name, c}}), c);
  }
  return out;
}

// "1,2,3"
std::string joined(const std::vector<int64_t>& numbers) {
  std::string out;
  for (int64_t n : numbers) {
    if (!out.empty()) out += ',';
    out += std::to_string(n);
  }
  return out;
}

int value_bin(double v, const Scale& s, bool maximize) {
  double f = s.hi > s.lo ? (v - s.lo) / (s.hi - s.lo) : 1;
  if (!maximize) f = 1 - f;
  return static_cast<int>(std::floor(f * 7.999));
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

std::string history_svg(const StudyView& study) {
  auto [lo, hi] = value_range(study, false);
  if (!(lo <= hi)) return empty_svg("history", "no value of " + study.metric + " yet");
  Scale x = fit(1, std::max<double>(1, static_cast<double>(study.trials.size())), kLeft + 6,
                kWidth - kRight - 6);
  Scale y = fit(lo, hi, kHeight - kBottom - 6, kTop + 6);
  std::string out = open_svg("history", kWidth, kHeight);
  axes(out, x, y, "trial", study.metric + " (each trial's best)");
  std::vector<std::pair<double, double>> points, best_so_far;
  std::optional<double> best;
  for (const TrialView& t : study.trials) {
    if (!t.best) continue;
    double px = x(static_cast<double>(t.row.number));
    points.emplace_back(px, y(*t.best));
    if (!best || (study.maximize ? *t.best > *best : *t.best < *best)) best = t.best;
    best_so_far.emplace_back(px, y(*best));
  }
  dots(out, points, "stroke=\"#4878d0\"");
  out += "<path class=\"best-line\" d=\"" + step_line(best_so_far) + "\"/>";
  out +=
      "<title>" + escape(study.metric) + ": each trial's best (dots), best so far (line)</title>";
  return out + "</svg>";
}

std::string curves_svg(const StudyView& study) {
  auto [lo, hi] = value_range(study, true);
  if (!(lo <= hi)) return empty_svg("curves", "no value of " + study.metric + " yet");
  int64_t last_step = 1;
  for (const TrialView& t : study.trials)
    if (!t.curve.empty()) last_step = std::max(last_step, t.curve.back().first);
  Scale x = fit(0, static_cast<double>(last_step), kLeft, kWidth - kRight);
  Scale y = fit(lo, hi, kHeight - kBottom - 4, kTop + 4);
  std::string out = open_svg("curves", kWidth, kHeight);
  axes(out, x, y, "step", study.metric);
  const size_t columns = static_cast<size_t>(kWidth - kLeft - kRight);
  for (const TrialView& t : study.trials) {
    if (t.curve.empty()) continue;
    // No <title> per curve (ten thousand of them weigh): dashboard.js names the one hovered.
    out += "<path class=\"curve\" data-trial=\"" + std::to_string(t.row.number) + "\" stroke=\"" +
           status_colour(t.row.status) + "\" d=\"";
    // At most two points (min and max) per pixel column, in step order, and always the last.
    const size_t n = t.curve.size();
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
        if (t.curve[j].second < t.curve[lo_i].second) lo_i = j;
        if (t.curve[j].second > t.curve[hi_i].second) hi_i = j;
      }
      emit(t.curve[std::min(lo_i, hi_i)]);
      if (lo_i != hi_i) emit(t.curve[std::max(lo_i, hi_i)]);
    }
    if (n == 1) {
      out += "h0";  // a single evaluation: a dot
    } else if ((n - 1) % per_column != 0) {
      emit(t.curve.back());
    }
    out += "\"/>";
  }
  return out + "</svg>";
}

std::string parallel_svg(const StudyView& study) {
  auto params = parameters(study);
  auto [lo, hi] = value_range(study, false);
  if (params.empty() || !(lo <= hi))
    return empty_svg("parallel", params.empty() ? "no parameters" : "no values yet");
  const double axes_n = static_cast<double>(params.size() + 1);
  const double left = 70, right = kWidth - 70, top = 28, bottom = kHeight - 20;
  auto axis_x = [&](size_t i) {
    return left + (right - left) * static_cast<double>(i) / (axes_n - 1);
  };
  std::vector<ParamAxis> axes_list;
  for (size_t i = 0; i < params.size(); ++i)
    axes_list.push_back(param_axis(study, params[i].first, params[i].second, bottom, top));
  Scale metric = fit(lo, hi, bottom, top);
  // One path per colour: any number of trials in eight elements.
  std::string lines[8];
  for (const TrialView& t : study.trials) {
    if (!t.best) continue;
    std::string& d = lines[value_bin(*t.best, metric, study.maximize)];
    for (size_t i = 0; i < axes_list.size(); ++i) {
      std::optional<double> py = axes_list[i].position(t.row.params);
      if (!py) continue;
      d += i == 0 ? "M" : "L";
      coord(d, axis_x(i));
      d += " ";
      coord(d, *py);
    }
    d += "L";
    coord(d, axis_x(axes_list.size()));
    d += " ";
    coord(d, metric(*t.best));
  }
  std::string out = open_svg("parallel", kWidth, kHeight);
  for (int b = 0; b < 8; ++b)
    if (!lines[b].empty())
      out += "<path class=\"lines\" stroke=\"" + std::string(value_colour(b)) + "\" d=\"" +
             lines[b] + "\"/>";
  auto draw_axis = [&](size_t i, const std::string& name,
                       const std::vector<std::pair<double, std::string>>& labels) {
    double ax = axis_x(i);
    out += "<g class=\"axes\"><line class=\"axis\" x1=\"" + number(ax) + "\" x2=\"" + number(ax) +
           "\" y1=\"" + number(top) + "\" y2=\"" + number(bottom) + "\"/>";
    out += "<text class=\"label\" x=\"" + number(ax) + "\" y=\"14\" text-anchor=\"middle\">" +
           escape(name) + "</text>";
    for (const auto& [py, text] : labels) {
      out += "<text x=\"" + number(ax + 4) + "\" y=\"";
      coord(out, py + 4);
      out += "\">" + escape(text) + "</text>";
    }
    out += "</g>";
  };
  for (size_t i = 0; i < axes_list.size(); ++i)
    draw_axis(i, axes_list[i].name, axis_labels(axes_list[i]));
  std::vector<std::pair<double, std::string>> metric_labels;
  for (double v : ticks(metric, 4)) metric_labels.emplace_back(metric(v), number(v));
  draw_axis(axes_list.size(), study.metric, metric_labels);
  return out + "</svg>";
}

std::vector<std::pair<std::string, std::string>> slice_svgs(const StudyView& study) {
  std::vector<std::pair<std::string, std::string>> out;
  auto [lo, hi] = value_range(study, false);
  if (!(lo <= hi)) return out;
  const double width = 340, height = 220, left = 52, bottom = 34, top = 10, right = 12;
  for (const auto& [name, numeric] : parameters(study)) {
    ParamAxis a = param_axis(study, name, numeric, left + 6, width - right - 6);
    Scale y = fit(lo, hi, height - bottom - 4, top + 4);
    std::string svg = open_svg("slice", width, height, "data-param=\"" + escape(name) + "\"");
    svg += "<g class=\"axes\">";
    for (double v : ticks(y, 4)) {
      svg += "<text x=\"" + number(left - 5) + "\" y=\"";
      coord(svg, y(v) + 4);
      svg += "\" text-anchor=\"end\">" + number(v) + "</text>";
    }
    for (const auto& [px, text] : axis_labels(a)) {
      svg += "<text x=\"";
      coord(svg, px);
      svg += "\" y=\"" + number(height - bottom + 15) + "\" text-anchor=\"middle\">" +
             escape(text) + "</text>";
    }
    svg += "<line class=\"axis\" x1=\"" + number(left) + "\" x2=\"" + number(left) + "\" y1=\"" +
           number(top) + "\" y2=\"" + number(height - bottom) + "\"/><line class=\"axis\" x1=\"" +
           number(left) + "\" x2=\"" + number(width - right) + "\" y1=\"" +
           number(height - bottom) + "\" y2=\"" + number(height - bottom) + "\"/>";
    svg += "<text class=\"label\" x=\"" + number((left + width) / 2) + "\" y=\"" +
           number(height - 3) + "\" text-anchor=\"middle\">" + escape(name) + "</text></g>";
    std::vector<std::pair<double, double>> points;
    for (const TrialView& t : study.trials) {
      std::optional<double> px = a.position(t.row.params);
      if (t.best && px) points.emplace_back(*px, y(*t.best));
    }
    dots(svg, points, "stroke=\"#4878d0\"");
    out.emplace_back(name, svg + "</svg>");
  }
  return out;
}

std::string tree_svg(const StudyView& study) {
  if (study.stages.empty()) return empty_svg("tree", "no stages yet");
  // Rows: a stage shares the row of its first child; every other child opens a new row below.
  std::unordered_map<StageId, size_t> row, position;
  for (size_t i = 0; i < study.stages.size(); ++i) position[study.stages[i].stage.id] = i;
  size_t rows = 0;
  int64_t last_step = 1;
  for (const StageView& s : study.stages) {  // parents come before their children
    last_step = std::max(last_step, s.stage.end);
    auto parent = position.find(s.stage.parent);
    bool first_child = false;
    if (parent != position.end()) {
      for (StageId c : study.stages[parent->second].stage.children)
        if (position.count(c)) {
          first_child = c == s.stage.id;
          break;
        }
    }
    row[s.stage.id] = first_child ? row[s.stage.parent] : rows++;
  }
  const double row_h = std::clamp(560.0 / static_cast<double>(rows), 3.0, 22.0);
  const double height = kTop + row_h * static_cast<double>(rows) + kBottom;
  Scale x = fit(0, static_cast<double>(last_step), kLeft, kWideWidth - kRight);
  auto y = [&](StageId id) { return kTop + row_h * (static_cast<double>(row[id]) + 0.5); };
  std::string out = open_svg("tree", kWideWidth, height,
                             "data-stages=\"" + std::to_string(study.stages.size()) + "\"");
  wide_x_axis(out, x, kLeft, height, "step");
  // Branches: from the parent's row at its end down to the child's row.
  out += "<path class=\"branches\" d=\"";
  for (const StageView& s : study.stages) {
    if (!position.count(s.stage.parent) || row[s.stage.parent] == row[s.stage.id]) continue;
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

std::string timeline_svg(const StudyView& study) {
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

std::string pareto_svg(const StudyView& study, size_t x_objective, size_t y_objective) {
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
  std::string out = open_svg("pareto", kWidth, kHeight,
                             "data-x=\"" + escape(ox.metric) + "\" data-y=\"" + escape(oy.metric) +
                                 "\" data-front=\"" + std::to_string(study.front.size()) + "\"");
  axes(out, x, y, objective_label(ox), objective_label(oy));

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
  for (int drawing : {0, 1, 2})
    for (const TrialView* t : drawn) {
      const GoalResult& r = *t->result;
      if (layer(r) != drawing) continue;
      const std::string number_text = std::to_string(t->row.number);
      std::string title = "trial " + number_text + ", step " + std::to_string(r.step) + ": ";
      for (size_t i = 0; i < objectives.size(); ++i)
        title += (i ? ", " : "") + escape(objectives[i].metric) + " " + number(r.values[i]);
      title += r.pareto_optimal ? "; feasible, on the front"
               : r.feasible     ? "; feasible, dominated"
                                : "; infeasible (violation " + number(r.violation) + ")";
      if (t->row.status == TrialStatus::kFailed) title += "; failed";
      const char* cls = r.pareto_optimal ? "front" : r.feasible ? "feasible" : "infeasible";
      mark(out, x(r.values[x_objective]), y(r.values[y_objective]), r.pareto_optimal ? 5.5 : 3.5,
           "class=\"trial " + std::string(cls) +
               (t->row.status == TrialStatus::kFailed ? " failed" : "") + "\" data-trial=\"" +
               number_text + "\" data-feasible=\"" + (r.feasible ? "1" : "0") +
               "\" data-pareto=\"" + (r.pareto_optimal ? "1" : "0") + "\"",
           title);
    }
  return out + "</svg>";
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
      if (!t.best) continue;
      if (!best || (s->maximize ? *t.best > *best : *t.best < *best)) best = t.best;
      best_so_far.emplace_back(x(static_cast<double>(t.row.number)), y(*best));
    }
    out += "<path class=\"study-line\" data-study=\"" + std::to_string(s->row.id) + "\" stroke=\"" +
           colours[i++ % 8] + "\" d=\"" + step_line(best_so_far) + "\"><title>" +
           escape(s->row.name) + "</title></path>";
  }
  return out + "</svg>";
}

}  // namespace hippo::dashboard
