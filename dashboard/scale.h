// Scales and ticks of the dashboard's figures: a map from data to pixels and round tick values,
// computed in bounded work and memory for any finite numbers (1e308 beside -1e308, DBL_MAX beside
// 0.5, denormals, one value, all values equal). Every position is finite; no loop runs longer than
// a few dozen steps whatever the range. Non-finite values are the callers' to leave out.
#pragma once

#include <vector>

namespace hippo::dashboard {

// A linear (or log10) map from data [lo, hi] to pixels [from, to].
struct Scale {
  double lo = 0, hi = 1, from = 0, to = 1;
  bool log = false;
  // Where v lies between lo (0) and hi (1): finite for every finite v, clamped to [-1, 2] (a value
  // outside the range, never NaN); 0.5 when lo == hi. A NaN v gives 0.
  double fraction(double v) const;
  double operator()(double v) const { return from + fraction(v) * (to - from); }
};

// A scale over [lo, hi]: a single value is widened by a tenth of itself (1 around 0) without
// leaving the finite range; log10 when allow_log, lo > 0 and hi / lo >= 100. Non-finite or
// reversed bounds (no data) give the range around 0.
Scale fit(double lo, double hi, double from, double to, bool allow_log = false);

// About n round tick values within [lo, hi] (at most 4n + 2 of them, finite, ascending); lo and hi
// themselves when no round step fits (a span of a few ulps).
std::vector<double> ticks(const Scale& scale, int n);

}  // namespace hippo::dashboard
