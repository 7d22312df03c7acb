// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011). A draw is a pure function of (seed, purpose, stream, index), so any draw can
// be recomputed without replaying the ones before it: parameter i of a model is initialized from
// (seed, kInit, 0, i), and the data order of epoch e from (seed, kShuffle, e, i). Nothing here has
// state, which is what makes a restarted or forked run continue bit for bit.
#pragma once

#include <cstdint>

namespace hippo::worker {

enum class RngPurpose : uint32_t { kInit = 1, kShuffle = 2 };

// 64 random bits.
uint64_t random_u64(uint64_t seed, RngPurpose purpose, uint32_t stream, uint64_t index);
// Uniform in [0, 1), with 24 random bits (every value exactly representable as a float).
float random_uniform(uint64_t seed, RngPurpose purpose, uint32_t stream, uint64_t index);

}  // namespace hippo::worker
