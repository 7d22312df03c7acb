// `tpe`: a Tree-structured Parzen Estimator (Bergstra et al., 2011; Optuna's independent TPE
// sampler) over the space's leaves, schedule fields included since they are leaves too. A pool
// searcher (median_stop.h): max_trials (required) trials, `parallel` in flight (default 2), each
// trained to the spec's length.
//
// The first `n_startup` trials (default 5) are seeded draws. For each later trial the closed trials
// (scored by their value at their last evaluation) are split into the best `gamma` fraction
// (default 0.25, at least one) and the rest; per leaf, a Parzen estimator is fitted to each side,
// l(x) to the good and g(x) to the bad, `candidates` (default 24) values are drawn from l and the
// one maximizing l(x)/g(x) is kept. Numeric leaves use Gaussian kernels truncated to the leaf's
// range (in log space for loguniform; ints over [lo - 0.5, hi + 0.5], then rounded), plus a prior
// kernel over the whole range; categorical leaves (grid, choice) use smoothed frequencies. All
// randomness comes from (seed, trial id): the same events give the same trials.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind tpe_searcher_kind();

}  // namespace hippo
