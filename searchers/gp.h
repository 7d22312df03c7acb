// `gp`: Bayesian optimization with a Gaussian process, for small continuous spaces. A pool
// searcher (pool_searcher.h): max_trials (required, at most 300) trials, `parallel` in flight
// (default: the workers, with_parallel), each trained to the spec's length.
//
// The first `n_startup` trials (default max(5, d + 1) for d leaves) are seeded draws. For each
// later trial a GP is fitted to the closed trials (their value at their last evaluation): inputs
// scaled to [0, 1] (log space for loguniform; ints over [lo - 0.5, hi + 0.5], rounded after),
// outputs standardized, a Matérn-5/2 kernel with one length scale per leaf, a signal variance and a
// noise, those hyperparameters fitted by maximizing the log marginal likelihood (projected
// gradient ascent in log space from three fixed starts). The next trial maximizes the expected
// improvement over the best value: the best of `candidates` (default 2000) seeded uniform points,
// the best few of them refined by a local pattern search. Running trials are handled as a kriging
// believer: each counts as observed at the model's mean there, so that parallel proposals move
// away from points already being trained (the mean is unchanged, the uncertainty there is gone).
//
// Only uniform, loguniform and int leaves: grid and choice are refused (use tpe for categorical
// spaces). Each proposal costs O(n^3) in the n closed trials (a few hundred Cholesky
// factorizations for the fit), which is why max_trials is bounded. Everything is a pure function
// of (seed, trial id, the trials so far): the same events give the same trials.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind gp_searcher_kind();

}  // namespace hippo
