#include "stagetree/sequence.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <numbers>

#include "tests/stagetree/random_schedules.h"

namespace hippo {
namespace {

uint64_t bits(double v) {
  return std::bit_cast<uint64_t>(v);
}

// Expects `fn` to throw std::invalid_argument whose message contains `part`.
template <typename Fn>
void expect_invalid(Fn fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << part << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// The formulas of docs/spec.md (the schedules' table), written out independently of sequence.cc.
double interface_cosine(double init, double final_value, int64_t length, int64_t s) {
  double x = double(std::min(s, length));
  return final_value +
         (init - final_value) * (1 + std::cos(std::numbers::pi * x / double(length))) / 2;
}

TEST(Schedules, MultistepMatchesInterface) {
  const double init = 0.1, gamma = 0.3;
  const std::vector<int64_t> milestones = {468, 936};
  Sequence seq = multistep(init, milestones, gamma);
  for (int64_t s : {0, 1, 467, 468, 469, 935, 936, 100000}) {
    int k = 0;
    for (int64_t m : milestones) k += s >= m;
    EXPECT_EQ(bits(seq.value_at(s)), bits(init * std::pow(gamma, k))) << s;
  }
  EXPECT_EQ(seq.segments().size(), 3u);
}

TEST(Schedules, MultistepWithRepeatedAndZeroMilestones) {
  Sequence seq = multistep(1.0, {5, 0, 5}, 0.5);
  EXPECT_EQ(seq.value_at(0), 0.5);
  EXPECT_EQ(seq.value_at(4), 0.5);
  EXPECT_EQ(seq.value_at(5), 0.125);
  expect_invalid([] { multistep(1.0, {-1}, 0.5); }, "negative");
}

TEST(Schedules, StepDecayAndExponentialMatchInterface) {
  Sequence decay = step_decay(0.1, 100, 0.5);
  Sequence expo = exponential(0.2, 0.9, 468);
  for (int64_t s : {0, 99, 100, 250, 1000, 46800, 46801}) {
    EXPECT_EQ(bits(decay.value_at(s)), bits(0.1 * std::pow(0.5, double(s / 100)))) << s;
    EXPECT_EQ(bits(expo.value_at(s)), bits(0.2 * std::pow(0.9, double(s / 468)))) << s;
  }
}

TEST(Schedules, CosineMatchesInterface) {
  const int64_t length = 1000;
  Sequence seq = cosine(0.1, 0.001, length);
  for (int64_t s : {0, 1, 2, 499, 500, 999, 1000, 1001, 5000})
    EXPECT_EQ(bits(seq.value_at(s)), bits(interface_cosine(0.1, 0.001, length, s))) << s;
}

TEST(Schedules, PiecewiseMatchesInterface) {
  Sequence seq = piecewise({{0, 0.1}, {10, 0.01}, {20, 0.001}});
  EXPECT_EQ(seq.value_at(0), 0.1);
  EXPECT_EQ(seq.value_at(9), 0.1);
  EXPECT_EQ(seq.value_at(10), 0.01);
  EXPECT_EQ(seq.value_at(19), 0.01);
  EXPECT_EQ(seq.value_at(1 << 30), 0.001);
  expect_invalid([] { piecewise({{1, 0.1}}); }, "step 0");
  expect_invalid([] { piecewise({{0, 0.1}, {5, 0.2}, {5, 0.3}}); }, "strictly increasing");
}

TEST(Schedules, WarmupLinearWithNestedAfterMatchesInterface) {
  const double init = 0.1;
  const int64_t warmup = 50, length = 200;
  Sequence seq = warmup_linear(init, warmup, cosine(init, 0, length));
  for (int64_t s : {0, 1, 25, 48, 49, 50, 51, 149, 249, 250, 300}) {
    double want = s < warmup ? init * double(s + 1) / double(warmup)
                             : interface_cosine(init, 0, length, s - warmup);
    EXPECT_EQ(bits(seq.value_at(s)), bits(want)) << s;
  }
  expect_invalid([] { warmup_linear(0.1, 5, Sequence::text("adam")); }, "numeric");
  expect_invalid(
      [] {
        warmup_linear(0.1, kForever - 5, piecewise({{0, 1}, {10, 2}}));
      },
      "overflows");
  // Near the end of the step range: shifting by the warmup stays exact.
  Sequence late = warmup_linear(0.1, kForever - 20, piecewise({{0, 1}, {10, 2}}));
  EXPECT_EQ(late.value_at(kForever - 11), 1);
  EXPECT_EQ(late.value_at(kForever - 10), 2);
}

// docs/spec.md's wsd: warmup P (s + 1) / W, P until S, a cooldown over D steps with x = (s - S) /
// D, then F. Every shape, with and without a warmup, at every step around each boundary.
TEST(Schedules, WsdMatchesInterface) {
  constexpr double P = 0.1, F = 0.001;
  for (int64_t W : {0, 10})
    for (int64_t S : {W, W + 30})
      for (const char* shape : {"linear", "cosine", "1-sqrt"}) {
        const int64_t D = 20;
        Sequence seq = wsd(P, W, S, D, F, shape);
        for (int64_t s = 0; s < S + D + 5; ++s) {
          double want = F;
          if (s < W) {
            want = P * double(s + 1) / double(W);
          } else if (s < S) {
            want = P;
          } else if (s < S + D) {
            double x = double(s - S) / double(D);
            want = std::string(shape) == "linear" ? P + (F - P) * x
                   : std::string(shape) == "cosine"
                       ? F + (P - F) * (1 + std::cos(std::numbers::pi * x)) / 2
                       : F + (P - F) * (1 - std::sqrt(x));
          }
          EXPECT_EQ(bits(seq.value_at(s)), bits(want))
              << shape << " W " << W << " S " << S << " step " << s;
        }
        EXPECT_EQ(seq.value_at(kForever - 1), F);
      }
  // Cooldowns from one start in other shapes share every step before it, and part at the first
  // step whose values differ (S or S + 1: all three give P or nearly P at x = 0).
  Sequence linear = wsd(P, 10, 40, 20, F, "linear"), cosine = wsd(P, 10, 40, 20, F, "cosine");
  int64_t first = 40;
  while (bits(linear.value_at(first)) == bits(cosine.value_at(first))) ++first;
  EXPECT_EQ(divergence(linear, cosine), first);
  EXPECT_LE(first, 41);
  // A linear cooldown's first value is P exactly (x = 0): a later one parts at S + 1.
  EXPECT_EQ(divergence(wsd(P, 10, 40, 20, F, "linear"), wsd(P, 10, 60, 20, F, "linear")), 41);
  EXPECT_EQ(wsd(P, 0, 4, 4, 0, "1-sqrt").describe(0, 10),
            "0.1, 1-sqrt-decay 0.1->0 over [4, 8), 0");
  expect_invalid([] { wsd(P, -1, 4, 4, F, "linear"); }, "negative");
  expect_invalid([] { wsd(P, 5, 4, 4, F, "linear"); }, "warmup");
  expect_invalid([] { wsd(P, 0, 4, 0, F, "linear"); }, "at least 1");
  expect_invalid([] { wsd(P, 0, 4, 4, F, "square"); }, "linear, cosine or 1-sqrt");
}

TEST(Canonical, DegeneratePiecesBecomeConstantsAndMerge) {
  Sequence seq = Sequence::from_segments({
      {.kind = SegmentKind::kLinear, .start = 0, .end = 10, .v0 = 0.5, .v1 = 0.5},
      {.kind = SegmentKind::kExponential, .start = 10, .end = 20, .v0 = 0.5, .gamma = 1},
      {.kind = SegmentKind::kCosine, .start = 20, .end = 30, .v0 = 0.5, .v1 = 0.5},
      {.kind = SegmentKind::kExponential,
       .start = 30,
       .end = 35,
       .v0 = 0.5,
       .gamma = 0.1,
       .period = 5},
      {.start = 35, .v0 = 0.5},
  });
  EXPECT_EQ(seq, Sequence::constant(0.5));
  EXPECT_EQ(multistep(0.1, {3, 6}, 1.0), Sequence::constant(0.1));
  EXPECT_EQ(step_decay(0.1, 7, 1.0), Sequence::constant(0.1));
  // Fields that a kind does not use are reset, so equal functions compare equal.
  EXPECT_EQ(Sequence::from_segments({{.v0 = 2, .v1 = 9, .gamma = 3, .period = 4}}),
            Sequence::constant(2));
  // A one-step ramp is one value.
  Sequence ramp = warmup_linear(0.3, 1, Sequence::constant(0.3));
  EXPECT_EQ(ramp, Sequence::constant(0.3));
  // Zero and negative zero are different values.
  EXPECT_EQ(piecewise({{0, 0.0}, {5, -0.0}}).segments().size(), 2u);
}

TEST(Canonical, RefusesBadSegments) {
  expect_invalid([] { Sequence::from_segments({}); }, "no segments");
  expect_invalid([] { Sequence::from_segments({{.start = 1}}); }, "starts at 1");
  expect_invalid([] { Sequence::from_segments({{.start = 0, .end = 5}}); }, "never end");
  expect_invalid([] { Sequence::from_segments({{.end = 5}, {.start = 6}}); }, "expected 5");
  expect_invalid([] { Sequence::from_segments({{.v0 = NAN}}); }, "v0 must be finite");
  expect_invalid([] { Sequence::from_segments({{.kind = SegmentKind::kCosine, .v1 = 1}}); },
                 "finite end");
  expect_invalid(
      [] { Sequence::from_segments({{.kind = SegmentKind::kExponential, .v0 = 1, .gamma = -1}}); },
      "gamma");
  expect_invalid(
      [] { Sequence::from_segments({{.kind = SegmentKind::kExponential, .v0 = 1, .period = 0}}); },
      "period");
  expect_invalid([] { Sequence::from_segments({{.kind = SegmentKind(9)}}); }, "unknown");
  expect_invalid([] { cosine(0.1, 0, 0); }, "length");
  expect_invalid([] { step_decay(0.1, 0, 0.5); }, "every");
}

TEST(Divergence, Examples) {
  EXPECT_EQ(divergence(cosine(0.1, 0, 100), cosine(0.1, 0, 200)), 1);
  EXPECT_EQ(divergence(multistep(0.1, {468, 936}, 0.1), multistep(0.1, {468, 936}, 0.3)), 468);
  EXPECT_EQ(divergence(Sequence::constant(0.1), step_decay(0.1, 100, 0.5)), 100);
  EXPECT_EQ(divergence(step_decay(0.1, 100, 0.5), step_decay(0.1, 100, 0.5)), kForever);
  EXPECT_EQ(divergence(Sequence::text("adam"), Sequence::text("adam")), kForever);
  EXPECT_EQ(divergence(Sequence::text("adam"), Sequence::text("sgd"), 7), 7);
  EXPECT_EQ(divergence(Sequence::text("adam"), Sequence::constant(0), 3), 3);
  // `from` skips earlier differences.
  EXPECT_EQ(divergence(piecewise({{0, 1}, {10, 2}}), piecewise({{0, 3}, {10, 2}, {20, 4}}), 5), 5);
  EXPECT_EQ(divergence(piecewise({{0, 1}, {10, 2}}), piecewise({{0, 3}, {10, 2}, {20, 4}}), 10),
            20);
}

TEST(Divergence, HyperparamsTakeTheEarliestAndRefuseDifferentNames) {
  Hyperparams a = {{"lr", step_decay(0.1, 100, 0.5)}, {"wd", Sequence::constant(0)}};
  Hyperparams b = {{"lr", step_decay(0.1, 100, 0.5)}, {"wd", piecewise({{0, 0}, {40, 1}})}};
  EXPECT_EQ(divergence(a, b), 40);
  EXPECT_EQ(divergence(a, a), kForever);
  EXPECT_EQ(divergence_until(a, b, 0, 30), 30);
  Hyperparams c = {{"lr", step_decay(0.1, 100, 0.5)}, {"mom", Sequence::constant(0)}};
  EXPECT_EQ(divergence(a, c, 12), 12);
}

TEST(Divergence, LongPiecewiseConstantRangesAreNotWalkedStepByStep) {
  // Period 1 over the whole int64 range: only a period-by-period walk that stops at saturation
  // (0.5^k underflows to 0 after ~1075 periods) finishes, and the answer is "never".
  Sequence decaying = exponential(1.0, 0.5, 1);
  Sequence then_zero = Sequence::from_segments({
      {.kind = SegmentKind::kExponential, .end = 5000, .v0 = 1.0, .gamma = 0.5},
      {.start = 5000, .v0 = 0.0},
  });
  EXPECT_EQ(divergence(decaying, then_zero), kForever);
  // Identical long pieces are jumped over; the difference sits near the top of the range.
  Sequence a = piecewise({{0, 1}, {kForever - 2, 2}});
  Sequence b = piecewise({{0, 1}, {kForever - 1, 2}});
  EXPECT_EQ(divergence(a, b), kForever - 2);
  EXPECT_EQ(divergence(step_decay(1, kForever / 2, 0.5), step_decay(1, kForever / 3, 0.5)),
            kForever / 3);
}

TEST(Splice, DonorHistoryThenOwnValues) {
  // PBT: the donor's step decay up to 250, then a constant of the trial's own.
  Sequence donor = step_decay(0.1, 100, 0.5);
  Sequence own = Sequence::constant(0.07);
  Sequence s = splice(donor, own, 250);
  for (int64_t step : {0, 99, 100, 199, 200, 249})
    EXPECT_EQ(s.value_at(step), donor.value_at(step));
  for (int64_t step : {250, 251, 1000}) EXPECT_EQ(s.value_at(step), 0.07);
  EXPECT_EQ(divergence(s, donor), 250);
  // Chains of forks stay constant pieces.
  Sequence again = splice(s, Sequence::constant(0.03), 400);
  EXPECT_EQ(again.value_at(399), 0.07);
  EXPECT_EQ(again.value_at(400), 0.03);
  EXPECT_EQ(splice(donor, own, 0), own);
  // Where the values cannot be written exactly, it refuses.
  EXPECT_THROW(splice(cosine(0.1, 0, 100), own, 50), std::invalid_argument);
  EXPECT_THROW(splice(own, step_decay(0.1, 100, 0.5), 50), std::invalid_argument);
  EXPECT_THROW(splice(Sequence::text("sgd"), Sequence::text("adam"), 5), std::invalid_argument);
  EXPECT_EQ(splice(Sequence::text("sgd"), Sequence::text("sgd"), 5), Sequence::text("sgd"));
}

TEST(Describe, ReadableForms) {
  EXPECT_EQ(Sequence::constant(0.1).describe(0, 10), "0.1");
  EXPECT_EQ(Sequence::text("adam").describe(0, 10), "adam");
  EXPECT_EQ(cosine(0.1, 0.001, 100).describe(0, 100), "cosine 0.1->0.001 over [0, 100)");
  EXPECT_EQ(cosine(0.1, 0.001, 100).describe(50, 150), "cosine 0.1->0.001 over [0, 100), 0.001");
  EXPECT_EQ(step_decay(0.1, 100, 0.5).describe(0, 1000), "0.1*0.5^k every 100");
  EXPECT_EQ(step_decay(0.1, 100, 0.5).describe(100, 200), "0.05");
  EXPECT_EQ(warmup_linear(0.1, 10, Sequence::constant(0.1)).describe(0, 20),
            "linear 0->0.1 over [0, 10), 0.1");
}

TEST(Property, DivergenceEqualsStepByStepComparison) {
  std::mt19937_64 rng(1);
  const int64_t horizon = 40;  // beyond every boundary the random schedules use
  for (int i = 0; i < 2000; ++i) {
    Sequence a = testing::random_sequence(rng);
    Sequence b = rng() % 4 == 0 ? a : testing::random_sequence(rng);
    int64_t from = int64_t(rng() % 12);
    int64_t want = horizon;
    for (int64_t s = from; s < horizon && want == horizon; ++s) {
      bool same = a.is_text() || b.is_text()
                      ? a.is_text() && b.is_text() && a.text_value() == b.text_value()
                      : bits(a.value_at(s)) == bits(b.value_at(s));
      if (!same) want = s;
    }
    int64_t got = divergence(a, b, from);
    if (want < horizon)
      EXPECT_EQ(got, want) << i;
    else
      EXPECT_GE(got, horizon) << i;
    EXPECT_EQ(got, divergence(b, a, from)) << i;
  }
}

}  // namespace
}  // namespace hippo
