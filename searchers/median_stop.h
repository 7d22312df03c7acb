// `median_stop` (Optuna's MedianPruner rule), a pool searcher (pool_searcher.h).
//
// Trials are the grid points when the space has grid leaves (max_trials defaults to their
// number), else seeded draws (max_trials required), `parallel` of them in flight (default 2). At an
// evaluation step s after `grace` (a length, default the first evaluation step), once at least
// `min_trials` (default 5) trials have completed (trained to their length: stopped and failed ones
// do not count), a trial whose best value so far is worse than the median of the completed
// trials' values at s gets Stop; one whose values so far are all NaN too. That is Optuna's
// MedianPruner (n_startup_trials = min_trials, n_warmup_steps = grace + 1, n_min_trials = 1) and
// Vizier's median stopping rule. The last step is never judged: the trial is trained by then,
// there is nothing left to save.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind median_stop_searcher_kind();

}  // namespace hippo
