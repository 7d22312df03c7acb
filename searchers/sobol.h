// Quasi-random points for the `sobol` searcher (basic.h): the Sobol sequence (Joe and Kuo's
// direction numbers, Gray-code order), scrambled by a seeded linear matrix scramble and digital
// shift (as scipy's `qmc.Sobol(scramble=True)`), so that different seeds give different point
// sets with the same evenness. Point i is a pure function of (seed, i): nothing to remember.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "searchers/field.h"

namespace hippo {

// The dimensions the direction numbers here cover (Joe and Kuo's first 21).
inline constexpr size_t kSobolDims = 21;

// Fails at `at` (the spec's `name` of the searcher or sampler) when a space of `leaves` leaves
// is more than the direction numbers cover.
void check_sobol_leaves(size_t leaves, const Field& at);

// Point `index` (from 0) of the Sobol sequence in `dims` <= kSobolDims dimensions, each coordinate
// in [0, 1) with 32 bits; scrambled by `seed` when given (unscrambled, point 0 is the origin).
std::vector<double> sobol_point(uint64_t index, size_t dims, std::optional<uint64_t> seed);

// A seeded permutation of [0, n), n <= 2^62, as a pure function of (seed, i): grid's random order
// (a Feistel network over the next power of 4, walking the cycle back into [0, n)).
uint64_t permuted(uint64_t i, uint64_t n, uint64_t seed);

}  // namespace hippo
