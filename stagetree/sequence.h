// Hyper-parameter sequences: the value of one tunable setting as a function of the training step,
// in canonical piecewise form. Every schedule of docs/spec.md expands to a Sequence; two trials
// share step s when all their sequences have bit-identical values at every step <= s, and
// divergence() finds the first step where that stops, exactly, from the segments.
//
// Pure code, no I/O. The worker uses this file too (to evaluate values at each step), never the
// tree.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hippo {

// One past the last step of a segment that never ends.
inline constexpr int64_t kForever = INT64_MAX;

enum class SegmentKind {
  kConstant,
  kLinear,
  kCosine,
  kExponential,
  kLinearDecay,
  kCosineDecay,
  kSqrtDecay
};

// "constant", "linear", "cosine", "exponential", "linear-decay", "cosine-decay" or "1-sqrt-decay"
// (the names used in JSON and descriptions).
const char* segment_kind_name(SegmentKind kind);
// Whether a kind goes from v0 towards v1 over its range, changing at every step (linear, cosine,
// and the three decays): it takes v1 and needs a finite end.
bool interpolates(SegmentKind kind);

// One piece of a sequence over the half-open step range [start, end). Value at step s, exactly:
//   kConstant     v0
//   kLinear       v0 + (v1 - v0) * (s - start + 1) / (end - start)     (reaches v1 at s = end - 1;
//                 with v0 = 0 this is warmup_linear's init * (s + 1) / warmup bit for bit)
//   kCosine       v1 + (v0 - v1) * (1 + cos(pi * (s - start) / (end - start))) / 2
//   kExponential  v0 * pow(gamma, floor((s - start) / period))
// and the cooldowns of wsd, with x = (s - start) / (end - start) computed first (as docs/spec.md
// writes them; v0 at s = start, where kLinear is one step ahead, as warmups are):
//   kLinearDecay  v0 + (v1 - v0) * x
//   kCosineDecay  v1 + (v0 - v1) * (1 + cos(pi * x)) / 2   (kCosine computes pi * (s - start)
//   first) kSqrtDecay    v1 + (v0 - v1) * (1 - sqrt(x))
// (s - start), (end - start) and the floor are computed in int64 and converted to double.
struct Segment {
  SegmentKind kind = SegmentKind::kConstant;
  int64_t start = 0;
  int64_t end = kForever;
  double v0 = 0;
  double v1 = 0;
  double gamma = 1;
  int64_t period = 1;

  double value_at(int64_t step) const;
  bool operator==(const Segment&) const = default;

 private:
  // The decays' x = (s - start) / (end - start), in [0, 1).
  double decay_x(int64_t step) const { return double(step - start) / double(end - start); }
};

// A sequence over all steps [0, kForever): either numeric segments that tile [0, kForever), or a
// categorical constant (a string such as "adam", the same at every step).
class Sequence {
 public:
  Sequence() : Sequence(constant(0)) {}
  static Sequence constant(double value);
  static Sequence text(std::string value);
  // Validates that the segments tile [0, kForever) in order with valid parameters (throws
  // std::invalid_argument naming the problem) and canonicalizes: degenerate pieces become
  // constants (linear/cosine with v0 == v1, exponential with gamma == 1 or one period long),
  // neighbouring constants with equal values merge.
  static Sequence from_segments(std::vector<Segment> segments);

  bool is_text() const { return is_text_; }
  const std::string& text_value() const { return text_; }
  const std::vector<Segment>& segments() const { return segments_; }

  double value_at(int64_t step) const;  // numeric sequences only
  // Human-readable form of the values over [start, end), e.g. "0.1", "adam",
  // "cosine 0.1->0.001 over [0, 100)", "0.1*0.5^k every 100", "linear 0->0.1 over [0, 10)";
  // pieces joined by ", ".
  std::string describe(int64_t start, int64_t end) const;

  bool operator==(const Sequence&) const = default;

 private:
  // Takes already validated parts; the public factories are the only way in.
  Sequence(bool is_text, std::string text, std::vector<Segment> segments)
      : is_text_(is_text), text_(std::move(text)), segments_(std::move(segments)) {}

  bool is_text_ = false;
  std::string text_;
  std::vector<Segment> segments_;
};

// The first step >= from at which a and b have different values (bit for bit; a text and a numeric
// sequence differ everywhere), or kForever if they never differ. Exact: walks the segments and
// compares values only at steps where one of them can change (every step inside linear/cosine
// pieces that differ, period boundaries of exponentials, segment boundaries).
int64_t divergence(const Sequence& a, const Sequence& b, int64_t from = 0);

// A trial's hyper-parameters: name -> sequence, ordered by name.
using Hyperparams = std::map<std::string, Sequence>;

// First step >= from at which any sequence differs; both maps must have the same names (else from).
int64_t divergence(const Hyperparams& a, const Hyperparams& b, int64_t from = 0);

// divergence() over [from, until) only: the first differing step there, or `until` when a and b
// agree on the whole range. Cheaper than divergence() when only a range matters.
int64_t divergence_until(const Sequence& a, const Sequence& b, int64_t from, int64_t until);
int64_t divergence_until(const Hyperparams& a, const Hyperparams& b, int64_t from, int64_t until);

// The sequence that has `before`'s values at steps < at and `after`'s from `at` on: a trial that
// keeps a donor's history (PBT's exploit). Throws std::invalid_argument where that cannot be
// written exactly: a linear, cosine or exponential piece cut at `at` in the middle (its values
// depend on where it starts and ends), or two different categorical values.
Sequence splice(const Sequence& before, const Sequence& after, int64_t at);

// Schedule shorthands of docs/spec.md, with every length already in steps (unit applied).
Sequence multistep(double init, std::vector<int64_t> milestones, double gamma);
Sequence step_decay(double init, int64_t every, double gamma);
Sequence exponential(double init, double gamma, int64_t unit);
Sequence cosine(double init, double final_value, int64_t length);
// points: [start_step, value], the first at step 0, starts strictly increasing.
Sequence piecewise(const std::vector<std::pair<int64_t, double>>& points);
// init * (s + 1) / warmup for s < warmup, then `after` evaluated at s - warmup.
Sequence warmup_linear(double init, int64_t warmup, const Sequence& after);
// Warmup-stable-decay: peak * (s + 1) / warmup for s < warmup (none when warmup is 0), peak until
// decay_start, then a cooldown to final_value over `decay` steps whose shape is "linear"
// (kLinearDecay), "cosine" (kCosineDecay) or "1-sqrt" (kSqrtDecay), and final_value from
// decay_start + decay on.
// Throws std::invalid_argument on negative lengths, decay_start < warmup, decay < 1 or an unknown
// shape.
Sequence wsd(double peak, int64_t warmup, int64_t decay_start, int64_t decay, double final_value,
             const std::string& shape);

}  // namespace hippo
