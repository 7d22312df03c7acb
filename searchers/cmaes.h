// `cmaes`: the covariance matrix adaptation evolution strategy (N. Hansen, "The CMA Evolution
// Strategy: A Tutorial", 2016: the (mu/mu_w, lambda) strategy with cumulative step-size adaptation
// and rank-one and rank-mu updates of the covariance), with Optuna's CmaEsSampler's defaults. A
// pool searcher (pool_searcher.h): max_trials (required) trials, `parallel` in flight (default:
// the workers, with_parallel), each trained to the spec's length; its value is its last one.
//
// Leaves are uniform, loguniform and int only (grid and choice are refused: tpe handles those),
// mapped to [0, 1] as Optuna maps them (log space for loguniform; ints over [lo - 0.5, hi + 0.5],
// rounded after). Options: `population` (lambda, default 4 + floor(3 ln d) for d leaves, the
// cmaes library's), `sigma0` (default 1/6 of the range, Optuna's min_range / 6). The search
// starts at the middle of the space with the identity covariance.
//
// Each trial belongs to the generation that was current when it was proposed; once `population`
// trials of the current generation have closed with a finite value, the first `population` of
// them (by trial id, as Optuna tells them) update the distribution and the next generation
// begins. Until then every new trial is one more draw of the current generation (so a failed or
// diverged trial is made up for). A draw outside [0, 1]^d is drawn again (up to 100 times, then
// clipped), as the cmaes library does. Draws come from (seed, trial id). The distribution (mean,
// step size, covariance, evolution paths) and each trial's generation are saved with the pool.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind cmaes_searcher_kind();

}  // namespace hippo
