// libFuzzer target: the dashboard's figures (dashboard/figures.h) over random studies built in
// memory from the input: one to three objectives, metric values, parameters, steps and times
// taken from a table of edge values (0, -0, ±1e308, ±DBL_MAX, denormals, NaN, ±infinity, 2^53,
// ...) or from the input's raw bytes, curves, stages and executions in any order, and the drawing
// summarized or not. Every figure must come back in bounded size with every coordinate a finite
// number; a crash, a sanitizer report, a hang (ticks without end), running out of memory or a
// coordinate that is NaN or infinite is a bug.
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "dashboard/figures.h"
#include "dashboard/summary.h"

namespace {

using namespace hippo;
using namespace hippo::dashboard;

// The input, read from the front; zeros once it is used up.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint64_t bits() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return v;
  }
  // An edge value, or any double (the raw bits).
  double number() {
    static const double edges[] = {0.0,
                                   -0.0,
                                   1.0,
                                   0.5,
                                   -1.0,
                                   1e308,
                                   -1e308,
                                   DBL_MAX,
                                   -DBL_MAX,
                                   std::numeric_limits<double>::denorm_min(),
                                   -std::numeric_limits<double>::denorm_min(),
                                   DBL_MIN,
                                   1e-300,
                                   1e300,
                                   9007199254740993.0,
                                   std::numeric_limits<double>::quiet_NaN(),
                                   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity()};
    constexpr size_t kEdges = sizeof edges / sizeof edges[0];
    const uint8_t pick = byte();
    if (pick < 2 * kEdges) return edges[pick % kEdges];
    const uint64_t raw = bits();
    double v;
    std::memcpy(&v, &raw, sizeof v);
    return v;
  }
  int64_t step() {
    const uint8_t pick = byte();
    if (pick < 16) return static_cast<int64_t>(bits() >> 2);  // up to 2^62, room for an end
    return pick * 10;
  }

 private:
  const uint8_t* data_;
  size_t size_, at_ = 0;
};

// Every coordinate attribute (x, y, d, width, ...) of the figure: no "nan" or "inf" in it.
void check(const std::string& svg) {
  if (svg.size() > (8u << 20)) {
    std::fprintf(stderr, "a figure of %zu bytes\n", svg.size());
    std::abort();
  }
  static const char* const names[] = {" x=\"",  " y=\"",     " x1=\"",     " x2=\"",
                                      " y1=\"", " y2=\"",    " cx=\"",     " cy=\"",
                                      " r=\"",  " width=\"", " height=\"", " d=\""};
  for (const char* name : names)
    for (size_t at = svg.find(name); at != std::string::npos; at = svg.find(name, at + 1)) {
      const size_t from = at + std::strlen(name), to = svg.find('"', from);
      const std::string value = svg.substr(from, to - from);
      if (value.find("nan") != std::string::npos || value.find("inf") != std::string::npos) {
        std::fprintf(stderr, "not finite:%s%s\"\n", name, value.c_str());
        std::abort();
      }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  StudyView s;
  const size_t objectives = 1 + in.byte() % 3;
  for (size_t o = 0; o < objectives; ++o)
    s.goals.objectives.push_back({"o" + std::to_string(o), (in.byte() & 1) != 0});
  s.metric = "o0";
  s.maximize = s.goals.objectives[0].maximize;
  const size_t trials = in.byte() % 64;
  for (size_t i = 0; i < trials; ++i) {
    TrialView t;
    t.row.id = static_cast<TrialId>(i);
    t.row.number = static_cast<int64_t>(i + 1);
    t.row.status = static_cast<TrialStatus>(in.byte() % 6);
    t.row.params = {{"x", in.number()},
                    {"c", std::string(1, static_cast<char>('a' + in.byte() % 4))}};
    if (!std::isfinite(t.row.params["x"].get<double>())) t.row.params["x"] = 0.5;  // JSON has none
    const size_t points = in.byte() % 4;
    for (size_t k = 0; k < points; ++k) {
      const double v = in.number();
      if (!std::isfinite(v)) continue;  // the model never keeps one (model.cc)
      t.curve.emplace_back(in.step(), v);
      if (!t.best || (s.maximize ? v > *t.best : v < *t.best)) t.best = v;
    }
    std::sort(t.curve.begin(), t.curve.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    if (objectives > 1 && (in.byte() & 1)) {
      GoalResult r;
      for (size_t o = 0; o < objectives; ++o) r.values.push_back(in.number());
      r.feasible = (in.byte() & 3) != 0;
      r.pareto_optimal = r.feasible && (in.byte() & 1);
      if (r.pareto_optimal) s.front.push_back(t.row.number);
      t.result = r;
    }
    s.trials.push_back(std::move(t));
  }
  // A chain of stages, and executions at any times.
  const size_t stages = in.byte() % 8;
  for (size_t i = 0; i < stages; ++i) {
    StageView v;
    v.stage.id = static_cast<StageId>(i);
    v.stage.parent = i == 0 ? kNoStage : static_cast<StageId>(i - 1);
    v.stage.start = in.step();
    v.stage.end = v.stage.start + in.byte();
    v.stage.trained_until = v.stage.start + in.byte() % 8;
    if (i + 1 < stages) v.stage.children.push_back(static_cast<StageId>(i + 1));
    v.state = static_cast<StageState>(in.byte() % 4);
    v.on_critical_path = (in.byte() & 1) != 0;
    s.stages.push_back(v);
  }
  const size_t executions = in.byte() % 8;
  for (size_t i = 0; i < executions; ++i) {
    ExecutionRow e;
    e.stage = static_cast<StageId>(in.byte() % 8);
    e.worker = "w" + std::to_string(in.byte() % 3);
    e.started_at = in.number();
    e.ended_at = in.number();
    if (!std::isfinite(e.started_at) || !std::isfinite(e.ended_at)) continue;  // REAL columns
    s.executions.push_back(e);
  }
  const Drawing d =
      drawing_of(s, {static_cast<int64_t>(in.byte())}, in.byte() % 32, 1 + in.byte() % 8);
  check(history_svg(s, d));
  check(curves_svg(s, d));
  check(parallel_svg(s, d));
  for (const auto& [name, svg] : slice_svgs(s, d)) check(svg);
  check(importance_svg(s));
  check(tree_svg(s, d));
  check(timeline_svg(s));
  if (objectives > 1) {
    check(pareto_svg(s, d));
    check(hypervolume_svg(s));
  }
  check(compare_svg({&s}));
  (void)drawing_note(d, s.metric);
  return 0;
}
