#include "dashboard/scale.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hippo::dashboard {
namespace {

constexpr double kMax = std::numeric_limits<double>::max();

// Beyond this magnitude a difference of two values may overflow: they are halved first.
constexpr double kHuge = 1e300;

double clamp_finite(double v) {
  return std::clamp(v, -kMax, kMax);
}

}  // namespace

double Scale::fraction(double v) const {
  double f;
  if (log) {
    const double a = std::log10(lo), b = std::log10(hi);
    const double x = v > 0 ? std::log10(v) : a;
    f = b > a ? (x - a) / (b - a) : 0.5;
  } else if (std::max({std::abs(lo), std::abs(hi), std::abs(v)}) > kHuge) {
    const double span = hi / 2 - lo / 2;
    f = span > 0 ? (v / 2 - lo / 2) / span : 0.5;
  } else {
    f = hi > lo ? (v - lo) / (hi - lo) : 0.5;
  }
  if (std::isnan(f)) return 0;
  return std::clamp(f, -1.0, 2.0);
}

Scale fit(double lo, double hi, double from, double to, bool allow_log) {
  Scale s;
  s.from = from;
  s.to = to;
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) lo = hi = 0;  // no data
  s.log = allow_log && lo > 0 && hi / lo >= 100;
  if (lo == hi && !s.log) {
    // A tenth of the value, and never less than the smallest normal number (a denormal's tenth
    // is nothing), kept finite (DBL_MAX's tenth is not).
    const double pad =
        lo == 0 ? 1 : std::max(std::abs(lo) * 0.1, std::numeric_limits<double>::min());
    lo = clamp_finite(lo - pad);
    hi = clamp_finite(hi + pad);
  }
  s.lo = lo;
  s.hi = hi;
  return s;
}

std::vector<double> ticks(const Scale& s, int n) {
  n = std::max(n, 2);
  std::vector<double> out;
  if (s.log) {
    const double first = std::floor(std::log10(s.lo)), last = std::ceil(std::log10(s.hi));
    // Every `every`-th power of ten: at most n + 2 of the 600-odd a double spans.
    const double every = std::max(1.0, std::ceil((last - first + 1) / (n + 1)));
    const int count = static_cast<int>((last - first) / every);
    for (int i = 0; i <= count; ++i) {
      const double v = std::pow(10.0, first + i * every);
      if (std::isfinite(v) && v > 0 && v / s.lo >= 0.999 && v / s.hi <= 1.001) out.push_back(v);
    }
    return out;
  }
  const double half_span = s.hi / 2 - s.lo / 2;  // finite for finite bounds
  if (!(half_span > 0)) return {s.lo};
  const double raw = half_span / n * 2;  // at most the span: finite
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 0;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * magnitude) {
      step = m * magnitude;
      break;
    }
  if (!(step > 0) || !std::isfinite(step)) return {s.lo, s.hi};
  // The ticks are k * step for whole k in [lo / step, hi / step]: about n of them. Counted with an
  // integer, because at 1e16 and beyond ++k on a double would not move.
  const double first = std::ceil(s.lo / step), last = std::floor(s.hi / step);
  if (!(last >= first) || last - first > 4.0 * n) return {s.lo, s.hi};
  const int count = static_cast<int>(last - first);
  for (int i = 0; i <= count; ++i) {
    double v = (first + i) * step;
    if (!std::isfinite(v) || v < s.lo - step * 1e-9 || v > s.hi + step * 1e-9) continue;
    if (std::abs(v) < step * 1e-9) v = 0;
    if (out.empty() || v > out.back()) out.push_back(v);
  }
  if (out.empty()) return {s.lo, s.hi};
  return out;
}

}  // namespace hippo::dashboard
