// `median_stop` (Optuna's MedianPruner rule), a pool searcher (pool_searcher.h).
//
// Trials are the grid points when the space has grid leaves (max_trials defaults to their
// number), else seeded draws (max_trials required). At an evaluation step s after `grace` (a
// length, default the first evaluation step), once at least `min_trials` (default 3) other trials
// have a value at s, a trial whose value is worse than the median of theirs gets Stop. The last
// step is never judged: the trial is trained by then, there is nothing left to save.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind median_stop_searcher_kind();

}  // namespace hippo
