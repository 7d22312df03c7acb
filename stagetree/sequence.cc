#include "stagetree/sequence.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <stdexcept>

namespace hippo {

namespace {

// Bit-for-bit equality: 0.0 and -0.0 are different values here (and a NaN equals itself), because
// sharing a step means training with exactly the same numbers.
bool same_bits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// The cosine formula of sequence.h and docs/spec.md, with x = s - start and n = end - start.
double cosine_value(double v0, double v1, int64_t x, int64_t n) {
  return v1 + (v0 - v1) * (1 + std::cos(std::numbers::pi * double(x) / double(n))) / 2;
}

bool changes_every_step(const Segment& s) {
  return interpolates(s.kind);
}

// True when a and b give the same value at every step both cover, judged from their parameters.
bool same_function(const Segment& a, const Segment& b) {
  if (a.kind != b.kind || !same_bits(a.v0, b.v0)) return false;
  switch (a.kind) {
    case SegmentKind::kConstant:
      return true;
    case SegmentKind::kExponential:
      return a.start == b.start && same_bits(a.gamma, b.gamma) && a.period == b.period;
    case SegmentKind::kLinear:
    case SegmentKind::kCosine:
    case SegmentKind::kLinearDecay:
    case SegmentKind::kCosineDecay:
    case SegmentKind::kSqrtDecay:
      return a.start == b.start && a.end == b.end && same_bits(a.v1, b.v1);
  }
  return false;
}

// The first step after s at which a piecewise-constant segment can change value (its next period
// boundary or its end), without overflowing near kForever.
int64_t next_change(const Segment& seg, int64_t s) {
  if (seg.kind == SegmentKind::kConstant) return seg.end;
  int64_t offset = s - seg.start;
  int64_t boundary = offset - offset % seg.period;  // start of the current period, from start
  if (seg.period > kForever - seg.start - boundary) return seg.end;
  return std::min(seg.end, seg.start + boundary + seg.period);
}

// True when a piecewise-constant segment keeps the value it has at s for all later steps: always
// for a constant; for an exponential once pow(gamma, k) has saturated to 0 or infinity (the value
// moves monotonically towards that limit, so once reached it stays).
bool settled(const Segment& seg, int64_t s) {
  if (seg.kind == SegmentKind::kConstant) return true;
  double limit = seg.v0 * (seg.gamma < 1 ? 0.0 : HUGE_VAL);
  return same_bits(seg.value_at(s), limit);
}

// First step in [s, e) where two segments that both cover [s, e) differ, or e.
int64_t first_difference_in(const Segment& a, const Segment& b, int64_t s, int64_t e) {
  if (changes_every_step(a) || changes_every_step(b)) {
    for (; s < e; ++s)
      if (!same_bits(a.value_at(s), b.value_at(s))) return s;
    return e;
  }
  // Both piecewise constant: compare once per period of either side.
  while (s < e) {
    if (!same_bits(a.value_at(s), b.value_at(s))) return s;
    if (settled(a, s) && settled(b, s)) return e;
    s = std::min(next_change(a, s), next_change(b, s));
  }
  return e;
}

// Index of the segment that holds step s (segments tile [0, kForever)).
size_t segment_index(const std::vector<Segment>& segs, int64_t s) {
  if (segs.size() <= 4) {  // the common case: a short scan beats a binary search
    size_t i = segs.size() - 1;
    while (segs[i].start > s) --i;
    return i;
  }
  auto it = std::upper_bound(segs.begin(), segs.end(), s,
                             [](int64_t step, const Segment& seg) { return step < seg.start; });
  return size_t(it - segs.begin()) - 1;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void require_finite(double v, const char* what) {
  if (!std::isfinite(v)) throw std::invalid_argument(std::string(what) + " must be finite");
}

}  // namespace

const char* segment_kind_name(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kConstant:
      return "constant";
    case SegmentKind::kLinear:
      return "linear";
    case SegmentKind::kCosine:
      return "cosine";
    case SegmentKind::kExponential:
      return "exponential";
    case SegmentKind::kLinearDecay:
      return "linear-decay";
    case SegmentKind::kCosineDecay:
      return "cosine-decay";
    case SegmentKind::kSqrtDecay:
      return "1-sqrt-decay";
  }
  return "unknown";
}

bool interpolates(SegmentKind kind) {
  return kind == SegmentKind::kLinear || kind == SegmentKind::kCosine ||
         kind == SegmentKind::kLinearDecay || kind == SegmentKind::kCosineDecay ||
         kind == SegmentKind::kSqrtDecay;
}

double Segment::value_at(int64_t step) const {
  switch (kind) {
    case SegmentKind::kConstant:
      return v0;
    case SegmentKind::kLinear:
      return v0 + (v1 - v0) * double(step - start + 1) / double(end - start);
    case SegmentKind::kCosine:
      return cosine_value(v0, v1, step - start, end - start);
    case SegmentKind::kExponential:
      return v0 * std::pow(gamma, double((step - start) / period));
    case SegmentKind::kLinearDecay:
      return v0 + (v1 - v0) * decay_x(step);
    case SegmentKind::kCosineDecay:
      return v1 + (v0 - v1) * (1 + std::cos(std::numbers::pi * decay_x(step))) / 2;
    case SegmentKind::kSqrtDecay:
      return v1 + (v0 - v1) * (1 - std::sqrt(decay_x(step)));
  }
  return v0;
}

Sequence Sequence::constant(double value) {
  return from_segments({Segment{.kind = SegmentKind::kConstant, .v0 = value}});
}

Sequence Sequence::text(std::string value) {
  return Sequence(true, std::move(value), {});
}

Sequence Sequence::from_segments(std::vector<Segment> segments) {
  if (segments.empty()) throw std::invalid_argument("sequence has no segments");
  std::vector<Segment> out;
  int64_t expected_start = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    Segment s = segments[i];
    std::string where = "segment " + std::to_string(i) + " (" + segment_kind_name(s.kind) + "): ";
    auto fail = [&](const std::string& what) { throw std::invalid_argument(where + what); };
    if (s.start != expected_start)
      fail("starts at " + std::to_string(s.start) + ", expected " + std::to_string(expected_start) +
           " (segments must tile [0, forever) in order)");
    if (s.end <= s.start) fail("end must be greater than start");
    if (!std::isfinite(s.v0)) fail("v0 must be finite");
    switch (s.kind) {
      case SegmentKind::kConstant:
        s.v1 = 0, s.gamma = 1, s.period = 1;
        break;
      case SegmentKind::kLinear:
      case SegmentKind::kCosine:
      case SegmentKind::kLinearDecay:
      case SegmentKind::kCosineDecay:
      case SegmentKind::kSqrtDecay:
        if (!std::isfinite(s.v1)) fail("v1 must be finite");
        if (s.end == kForever) fail("a segment that goes from v0 to v1 needs a finite end");
        s.gamma = 1, s.period = 1;
        // Degenerate: one value throughout. value_at(start) keeps the exact bits it evaluates to.
        if (s.v0 == s.v1 || s.end - s.start == 1)
          s = Segment{.start = s.start, .end = s.end, .v0 = s.value_at(s.start)};
        break;
      case SegmentKind::kExponential:
        if (!std::isfinite(s.gamma) || s.gamma <= 0) fail("gamma must be finite and positive");
        if (s.period < 1) fail("period must be at least 1");
        s.v1 = 0;
        if (s.gamma == 1 || s.period >= s.end - s.start)
          s = Segment{.start = s.start, .end = s.end, .v0 = s.v0};
        break;
      default:
        fail("unknown segment kind");
    }
    if (!out.empty() && out.back().kind == SegmentKind::kConstant &&
        s.kind == SegmentKind::kConstant && same_bits(out.back().v0, s.v0)) {
      out.back().end = s.end;
    } else {
      out.push_back(s);
    }
    expected_start = s.end;
  }
  if (expected_start != kForever) throw std::invalid_argument("last segment must never end");
  return Sequence(false, "", std::move(out));
}

double Sequence::value_at(int64_t step) const {
  if (is_text_) throw std::invalid_argument("value_at on the text sequence \"" + text_ + "\"");
  if (step < 0) throw std::invalid_argument("value_at: negative step " + std::to_string(step));
  return segments_[segment_index(segments_, step)].value_at(step);
}

std::string Sequence::describe(int64_t start, int64_t end) const {
  if (is_text_) return text_;
  std::string out;
  for (const Segment& s : segments_) {
    if (s.end <= start || s.start >= end) continue;
    if (!out.empty()) out += ", ";
    int64_t from = std::max(start, s.start);
    switch (s.kind) {
      case SegmentKind::kConstant:
        out += format_number(s.v0);
        break;
      case SegmentKind::kLinear:
      case SegmentKind::kCosine:
      case SegmentKind::kLinearDecay:
      case SegmentKind::kCosineDecay:
      case SegmentKind::kSqrtDecay:
        // The piece's own range tells pieces apart that differ only in length.
        out += std::string(segment_kind_name(s.kind)) + " " + format_number(s.v0) + "->" +
               format_number(s.v1) + " over [" + std::to_string(s.start) + ", " +
               std::to_string(s.end) + ")";
        break;
      case SegmentKind::kExponential:
        // Within one period the piece is a single value: show that instead of the formula.
        if (next_change(s, from) >= std::min(end, s.end))
          out += format_number(s.value_at(from));
        else
          out += format_number(s.v0) + "*" + format_number(s.gamma) + "^k every " +
                 std::to_string(s.period);
        break;
    }
  }
  return out;
}

Sequence splice(const Sequence& before, const Sequence& after, int64_t at) {
  if (at <= 0) return after;
  if (before.is_text() || after.is_text()) {
    if (before == after) return before;
    throw std::invalid_argument("a categorical value cannot change during a trial");
  }
  std::vector<Segment> out;
  for (Segment s : before.segments()) {
    if (s.start >= at) break;
    if (s.end > at) {
      // A constant or exponential piece keeps its values when it ends sooner (an exponential's
      // depend on its start and period only); pieces that interpolate would change.
      if (interpolates(s.kind))
        throw std::invalid_argument(std::string("cannot cut a ") + segment_kind_name(s.kind) +
                                    " piece at step " + std::to_string(at));
      s.end = at;
    }
    out.push_back(s);
  }
  for (Segment s : after.segments()) {
    if (s.end <= at) continue;
    if (s.start < at) {
      // Only a constant may start later than it did; every other kind counts from its start.
      if (s.kind != SegmentKind::kConstant)
        throw std::invalid_argument(std::string("cannot start a ") + segment_kind_name(s.kind) +
                                    " piece at step " + std::to_string(at) + " inside it");
      s.start = at;
    }
    out.push_back(s);
  }
  return Sequence::from_segments(std::move(out));
}

int64_t divergence_until(const Sequence& a, const Sequence& b, int64_t from, int64_t limit) {
  from = std::max<int64_t>(from, 0);
  if (from >= limit) return limit;
  if (a.is_text() || b.is_text())
    return a.is_text() && b.is_text() && a.text_value() == b.text_value() ? limit : from;
  const std::vector<Segment>& sa = a.segments();
  const std::vector<Segment>& sb = b.segments();
  size_t ia = segment_index(sa, from);
  size_t ib = segment_index(sb, from);
  int64_t s = from;
  while (s < limit) {
    const Segment& x = sa[ia];
    const Segment& y = sb[ib];
    int64_t e = std::min({x.end, y.end, limit});
    if (!same_function(x, y)) {
      int64_t d = first_difference_in(x, y, s, e);
      if (d < e) return d;
    }
    s = e;
    if (s == x.end && s < limit) ++ia;
    if (s == y.end && s < limit) ++ib;
  }
  return limit;
}

int64_t divergence(const Sequence& a, const Sequence& b, int64_t from) {
  return divergence_until(a, b, from, kForever);
}

int64_t divergence(const Hyperparams& a, const Hyperparams& b, int64_t from) {
  return divergence_until(a, b, from, kForever);
}

int64_t divergence_until(const Hyperparams& a, const Hyperparams& b, int64_t from, int64_t until) {
  from = std::max<int64_t>(from, 0);
  if (from >= until) return until;
  if (a.size() != b.size()) return from;
  int64_t d = until;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return from;
    d = divergence_until(ia->second, ib->second, from, d);
  }
  return d;
}

Sequence multistep(double init, std::vector<int64_t> milestones, double gamma) {
  require_finite(init, "multistep init");
  require_finite(gamma, "multistep gamma");
  std::sort(milestones.begin(), milestones.end());
  if (!milestones.empty() && milestones.front() < 0)
    throw std::invalid_argument("multistep milestones must not be negative");
  std::vector<Segment> segs;
  int64_t start = 0;
  size_t passed = 0;  // milestones m with m <= start
  while (true) {
    while (passed < milestones.size() && milestones[passed] <= start) ++passed;
    int64_t end = passed < milestones.size() ? milestones[passed] : kForever;
    segs.push_back({.start = start, .end = end, .v0 = init * std::pow(gamma, double(passed))});
    if (end == kForever) break;
    start = end;
  }
  return Sequence::from_segments(std::move(segs));
}

Sequence step_decay(double init, int64_t every, double gamma) {
  if (every < 1) throw std::invalid_argument("step_decay every must be at least 1 step");
  return Sequence::from_segments(
      {{.kind = SegmentKind::kExponential, .v0 = init, .gamma = gamma, .period = every}});
}

Sequence exponential(double init, double gamma, int64_t unit) {
  if (unit < 1) throw std::invalid_argument("exponential unit must be at least 1 step");
  return Sequence::from_segments(
      {{.kind = SegmentKind::kExponential, .v0 = init, .gamma = gamma, .period = unit}});
}

Sequence cosine(double init, double final_value, int64_t length) {
  if (length < 1) throw std::invalid_argument("cosine length must be at least 1 step");
  // After the cosine the formula is pinned at min(s, length) = length.
  double tail = cosine_value(init, final_value, length, length);
  return Sequence::from_segments({
      {.kind = SegmentKind::kCosine, .start = 0, .end = length, .v0 = init, .v1 = final_value},
      {.start = length, .end = kForever, .v0 = tail},
  });
}

Sequence piecewise(const std::vector<std::pair<int64_t, double>>& points) {
  if (points.empty()) throw std::invalid_argument("piecewise needs at least one point");
  if (points.front().first != 0) throw std::invalid_argument("piecewise must start at step 0");
  std::vector<Segment> segs;
  for (size_t i = 0; i < points.size(); ++i) {
    int64_t end = i + 1 < points.size() ? points[i + 1].first : kForever;
    if (end <= points[i].first)
      throw std::invalid_argument("piecewise point starts must be strictly increasing");
    segs.push_back({.start = points[i].first, .end = end, .v0 = points[i].second});
  }
  return Sequence::from_segments(std::move(segs));
}

Sequence warmup_linear(double init, int64_t warmup, const Sequence& after) {
  if (warmup < 0) throw std::invalid_argument("warmup_linear warmup must not be negative");
  if (after.is_text()) throw std::invalid_argument("warmup_linear after must be numeric");
  if (warmup == 0) return after;
  std::vector<Segment> segs = {
      {.kind = SegmentKind::kLinear, .start = 0, .end = warmup, .v0 = 0, .v1 = init}};
  for (Segment s : after.segments()) {
    if (s.start > kForever - warmup || (s.end != kForever && s.end > kForever - warmup))
      throw std::invalid_argument("warmup_linear: the after schedule shifted by warmup overflows");
    s.start += warmup;
    if (s.end != kForever) s.end += warmup;
    segs.push_back(s);
  }
  return Sequence::from_segments(std::move(segs));
}

Sequence wsd(double peak, int64_t warmup, int64_t decay_start, int64_t decay, double final_value,
             const std::string& shape) {
  if (warmup < 0) throw std::invalid_argument("wsd warmup must not be negative");
  if (decay_start < warmup)
    throw std::invalid_argument("wsd decay_start must not precede warmup's end");
  if (decay < 1) throw std::invalid_argument("wsd decay must be at least 1 step");
  if (decay_start > kForever - 1 - decay)
    throw std::invalid_argument("wsd decay ends past the last step");
  SegmentKind cooldown = shape == "linear"   ? SegmentKind::kLinearDecay
                         : shape == "cosine" ? SegmentKind::kCosineDecay
                         : shape == "1-sqrt" ? SegmentKind::kSqrtDecay
                                             : throw std::invalid_argument(
                                                   "wsd shape must be linear, cosine or 1-sqrt, "
                                                   "got \"" +
                                                   shape + "\"");
  std::vector<Segment> segs;
  if (warmup > 0)
    segs.push_back({.kind = SegmentKind::kLinear, .start = 0, .end = warmup, .v0 = 0, .v1 = peak});
  if (decay_start > warmup) segs.push_back({.start = warmup, .end = decay_start, .v0 = peak});
  segs.push_back({.kind = cooldown,
                  .start = decay_start,
                  .end = decay_start + decay,
                  .v0 = peak,
                  .v1 = final_value});
  segs.push_back({.start = decay_start + decay, .v0 = final_value});
  return Sequence::from_segments(std::move(segs));
}

}  // namespace hippo
