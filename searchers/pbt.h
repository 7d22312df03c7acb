// `pbt`: population-based training (Jaderberg et al., 2017), in generations held in lock step.
//
// Options: `population` (>= 2, required), `interval` (a length, required), `fraction` (default
// 0.25), `perturb` (factors, default [0.8, 1.2]), `resample` (default 0.25). It creates its own
// trials (population + replacements), so max_trials is refused.
//
// The population starts as `population` seeded draws, each trained to `interval`. When every
// member has reported its value at the end of generation k (step k * interval), or failed (a
// member that diverged, closed without a finite value there, counts as failed), the members are
// ranked (ties: the older trial first; failed members last) and the worst q =
// round(fraction * n) of them (at least 1, at most n / 2), and every failed member, are replaced,
// so that the population keeps its size: each gets Stop (unless it failed), and a new trial takes
// its place,
//   Create{new id, params, Fork{donor, k * interval}}
// with a donor drawn from the best q that are alive, whose sequences are the donor's up to the fork
// step (a branch of the stage tree) and follow the new params after it. The new params are the
// donor's, explored leaf by leaf: with probability `resample` a fresh draw of the leaf's
// distribution; otherwise a number is multiplied by one of the `perturb` factors (drawn) and
// clipped to the leaf's range (ints rounded), and a grid or choice value is kept. Then every living
// member trains to (k + 1) * interval; the study finishes at the spec's length (a member that fails
// in the last generation is not replaced: there is nothing left to train), or when every member
// failed. Evaluations are the spec's ones in each generation plus its end. All randomness comes
// from (seed, new trial id).
//
// A schedule would be ill defined under PBT (which values would it change?): every
// hyper-parameter must be a constant or a plain distribution. A batch size drawn per member
// changes the steps of an epoch, so then interval and length must be given in steps.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind pbt_searcher_kind();

}  // namespace hippo
