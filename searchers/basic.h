// The searchers that decide everything up front: `grid` (every grid point, in grid order, or with
// `"order": "random"` in a seeded random order, without repeats, so that a max_trials below the
// grid's size is a random subset of it; the leaves that are not grids are drawn per point),
// `random` (max_trials draws of every leaf) and `sobol` (max_trials points of a scrambled Sobol
// sequence, sobol.h, each leaf a dimension: a grid leaf is a choice there; at most 21 leaves).
// All create and train every trial, kTrialBatch at a time (the first batch on study start, the
// others when the driver asks: searcher.h's next_batch), ignore validations, and finish when every
// trial is closed or failed. Draws, orders and scrambles are seeded by the spec's seed.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

// More grid points than this need an explicit max_trials (a spec typo should not make a billion
// trials).
inline constexpr uint64_t kMaxGridTrials = 1'000'000;

SearcherKind grid_searcher_kind();
SearcherKind random_searcher_kind();
SearcherKind sobol_searcher_kind();

}  // namespace hippo
