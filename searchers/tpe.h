// `tpe`: a Tree-structured Parzen Estimator (Bergstra et al., 2011) as Optuna's TPESampler has it,
// over the space's leaves, schedule fields included since they are leaves too. A pool searcher
// (pool_searcher.h): max_trials (required) trials, `parallel` in flight (default: the workers,
// with_parallel), each trained to the spec's length.
//
// The first `n_startup` trials (default 10, Optuna's) are seeded draws. For each later trial the
// closed trials (scored by their value at their last evaluation) are split into a good set,
// Optuna's min(ceil(0.1 n), 25) best of n (or the best `gamma` fraction, at least one, when given),
// and the rest; a Parzen estimator is fitted to each side, l(x) to the good and g(x) to the bad,
// and of `candidates` (default 24) draws from l the one maximizing l(x)/g(x) is kept. Numeric
// leaves use Gaussian kernels truncated to the leaf's range (in log space for loguniform; ints over
// [lo - 0.5, hi + 0.5], then rounded), categorical leaves (grid, choice) per-kernel smoothed
// distributions; a prior kernel of weight `prior_weight` (default 1) covers the whole space, and in
// a set of more than 25 trials the older ones weigh less (Optuna's default_weights).
//
// Univariate (default): one estimator per leaf with hyperopt's neighbour-gap bandwidths, each leaf
// chosen on its own. `multivariate: true`: one joint estimator over all leaves whose kernels are
// products over the leaves (Scott's-rule bandwidths), candidates drawn whole from one kernel of l
// and scored by the joint l/g, so that leaves that matter together are found together.
// Inside a scheduler (`"sampler": {"name": "tpe"}`) it follows BOHB (sampler.h): its observations
// are one level's, its good set is max(d + 1, 15%) of them unless `gamma` is given, and
// `random_fraction` of its proposals (default 1/3 there, 0 alone) are seeded draws.
// `constant_liar` (default true; no effect with parallel 1): running trials count as the worst of
// the bad set, so that parallel proposals avoid each other's regions.
//
// All randomness comes from (seed, trial id): the same events give the same trials.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind tpe_searcher_kind();

}  // namespace hippo
