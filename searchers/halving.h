// The halving family: successive halving (`sha`), asynchronous successive halving (`asha`), its
// multi-objective variant (`moasha`) and Hyperband (`hyperband`). Trials are trained to *rungs*,
// lengths that grow by a factor eta, and only the best 1/eta of the trials at a rung go on to the
// next one. A trial's value at a rung is the metric at the rung's last step; a trial that failed,
// reported no metric at that step or a value that is not finite has no value there and is never
// promoted from it. Ranks follow the spec's mode, ties going to the lower trial id.
//
// Options, besides metric, mode and max_trials:
//   eta         an integer >= 2, default 3
//   min_length  {"steps": N} or {"epochs": E}, required: the shortest rung
//   max_length  the same, default the spec's length: no rung is longer
//   parallel    asha, moasha: how many trials to keep in flight, default the workers (searcher.h)
//   brackets    hyperband only: how many brackets to run, the most aggressive first; default all
//   iterations  hyperband only: how many times to run the brackets, an integer >= 1, default 1
// Lengths in epochs are converted per trial, as the spec's length is. A trial at a rung of length
// L is trained to L and evaluated at the spec's evaluation steps below L, and at L.
//
// sha: max_trials trials (grid points first when the space has a grid, then seeded draws) all
//   start at rung 0. Rung k is min_length * eta^k, for every k where that is at most max_length,
//   except the top rung, which is max_length itself (so that the best trials train to the
//   study's length even when max_length / min_length is not a power of eta).
//   When every trial of a rung has finished, the best floor(n / eta) (at least 1) of the n that
//   have a value there go on to the next rung and the others are stopped. The study finishes
//   when the last rung is done (or no trial of a rung has a value).
// asha: the same rungs, without waiting. Whenever fewer than `parallel` trials are in flight, the
//   searcher promotes a trial (from the highest rung down: at rung k, the best trial not yet
//   promoted among the first floor(count / eta) of the count values there), else creates a new one
//   (up to max_trials). It finishes when nothing is in flight and there is nothing left to do.
//   A rung below the top *settles* once every trial is created, none is trained to it or below,
//   the rungs below have settled and none of its waiting trials can be promoted (among the
//   first floor(count / eta)): its waiting trials get Stop then (`stopped` at the rung), so a
//   finished study leaves none `done` below max_length (searchers/README.md). A configuration
//   given while it runs (`hippo enqueue`) is the next trial it creates; sha and hyperband, whose
//   brackets are drawn ahead, take none.
// moasha (Schmucker et al. 2021, MO-ASHA): asha, except that a rung is ranked by every objective:
//   by the front of constrained non-dominated sorting (pareto.h) of the trials' values and
//   violations there, then by larger crowding distance within the front, then by lower id. A trial
//   has no value at a rung where an objective's value is not finite. With one objective (and no
//   constraint) it makes exactly asha's decisions. A rung is sorted again when a trial has joined
//   it and a promotion is looked for (asha keeps an index instead): O(n log n) for n trials there
//   with up to two objectives, O(objectives * n^2) with more. Its saved state holds, at each rung,
//   {"values": [...], "violation"} where asha holds the number.
// hyperband: with s_max the largest s where min_length * eta^s <= max_length, brackets
//   s = s_max, s_max - 1, ... each run sha on ceil((s_max + 1) / (s + 1) * eta^s) trials whose
//   rungs are max_length * eta^(k - s) (rounded down to whole steps), k = 0..s. Trial ids go
//   through the brackets in that order, `iterations` times over (Li et al.'s outer loop), ids
//   continuing; max_trials, if given, caps the total by leaving out
//   the last trials, and a study budget (spec.h) ends it early. An iteration's brackets start at
//   once: the master schedules all requested work by its critical path, so they keep every worker
//   busy, where one bracket after another would leave workers idle while each bracket's last rung
//   trains its one or few trials. The next iteration's start when every bracket of the one before
//   has finished its first rung: their later rungs still train meanwhile, and only one
//   iteration's trials at a time wait for their first rung. With a model sampler (BOHB) a bracket's
//   trials are drawn when the bracket before it, of the same iteration or the one before, has
//   finished its first rung, so that each learns from the ones before. The grid's limit
//   (kMaxGridTrials) counts the trials of every iteration: more need max_trials.
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind sha_searcher_kind();
SearcherKind asha_searcher_kind();
SearcherKind moasha_searcher_kind();
SearcherKind hyperband_searcher_kind();

}  // namespace hippo
