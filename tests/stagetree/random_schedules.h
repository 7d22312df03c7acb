// Random sequences for the property tests: every schedule kind, with parameters drawn from small
// sets so that equal values, equal prefixes and partial agreement happen often.
#pragma once

#include <random>

#include "stagetree/sequence.h"

namespace hippo::testing {

template <typename T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return values.begin()[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}

inline double random_value(std::mt19937_64& rng) {
  return pick(rng, {0.1, 0.05, 0.2, 0.0});
}
inline int64_t random_length(std::mt19937_64& rng) {
  return pick<int64_t>(rng, {1, 2, 3, 4, 6, 8});
}

// A numeric sequence; `nest` allows warmup_linear (whose `after` is another random sequence).
inline Sequence random_numeric(std::mt19937_64& rng, bool nest = true) {
  switch (std::uniform_int_distribution<int>(0, nest ? 8 : 7)(rng)) {
    case 0:
      return Sequence::constant(random_value(rng));
    case 1: {
      std::vector<int64_t> milestones;
      for (int64_t m : {2, 4, 7})
        if (rng() % 2) milestones.push_back(m);
      return multistep(random_value(rng), milestones, pick(rng, {0.5, 0.1, 1.0}));
    }
    case 2:
      return step_decay(random_value(rng), random_length(rng), pick(rng, {0.5, 0.1}));
    case 3:
      return exponential(random_value(rng), pick(rng, {0.5, 0.9}), random_length(rng));
    case 4:
      return cosine(random_value(rng), random_value(rng), random_length(rng));
    case 5: {
      std::vector<std::pair<int64_t, double>> points = {{0, random_value(rng)}};
      for (int64_t s : {3, 5, 9})
        if (rng() % 2) points.emplace_back(s, random_value(rng));
      return piecewise(points);
    }
    case 6: {  // raw segments: a linear ramp between two other pieces
      int64_t a = random_length(rng), b = a + random_length(rng);
      return Sequence::from_segments({
          {.start = 0, .end = a, .v0 = random_value(rng)},
          {.kind = SegmentKind::kLinear,
           .start = a,
           .end = b,
           .v0 = random_value(rng),
           .v1 = random_value(rng)},
          {.start = b, .v0 = random_value(rng)},
      });
    }
    case 7: {  // warmup-stable-decay: cooldowns that start and end alike, in other shapes
      int64_t warmup = pick<int64_t>(rng, {0, 1, 2}), start = warmup + random_length(rng);
      return wsd(random_value(rng), warmup, start, random_length(rng), random_value(rng),
                 pick<const char*>(rng, {"linear", "cosine", "1-sqrt"}));
    }
    default:
      return warmup_linear(random_value(rng), random_length(rng), random_numeric(rng, false));
  }
}

inline Sequence random_sequence(std::mt19937_64& rng) {
  if (rng() % 8 == 0) return Sequence::text(pick<const char*>(rng, {"sgd", "adam"}));
  return random_numeric(rng);
}

}  // namespace hippo::testing
