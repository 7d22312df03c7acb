// `nsga2`: the genetic algorithm NSGA-II (Deb et al. 2002) as Optuna's NSGAIISampler has it, for
// one objective or several, with constraints (Deb's constrained domination, pareto.h).
//
// Options, besides objectives (or metric and mode), constraints and max_trials (required):
//   population      an integer in [2, 10000], default 20: the trials of each generation
//   mutation_prob   in [0, 1], default 1 / the number of leaves (Optuna's)
//   crossover_prob  in [0, 1], default 0.9
//   swapping_prob   in [0, 1], default 0.5: uniform crossover's chance per leaf
//
// Generation 0 is `population` seeded draws (as `random`, `tpe` and `pbt` start: a grid leaf is
// drawn like a choice, since a population smaller than the grid would otherwise cover only the
// grid points where the first leaves vary). Every trial trains to the spec's length with the spec's
// evaluation steps; its values are those of its last evaluation. When every trial of a generation
// is closed or failed, the parents are chosen from the previous parents and the generation's
// closed trials (a failed trial, or one with no evaluation or a NaN value, is never a parent):
// whole fronts of non-dominated sorting while they fit, the last one cut by crowding distance
// (largest first, ties to the lower id). Each child of the next generation then takes two parents,
// each the better of two drawn ones (lower front, then larger crowding distance within the parents;
// ties to the first drawn), with probability crossover_prob mixes them (each leaf from the second
// with probability swapping_prob, else from the first; without crossover the first parent's
// values), and resamples each leaf with probability mutation_prob (the leaf's value in the space's
// seeded draw for the child's id). A generation with no parent at all (every trial failed so far)
// is drawn like generation 0. Creation stops at max_trials (the last generation may be short);
// the study finishes once every trial has ended. A child equal to an earlier trial is kept: the
// master shares its stages.
//
// Every choice for a child comes from CounterRandom(seed, child id), so the searcher is a function
// of its saved state and the events after it. The saved state is
//   {"trials": [{"params", "status": "running"|"closed"|"failed",
//                "last": null | {"step", "values": [...], "violation"}}], "parents": [ids]}
// with infinities as "inf"/"-inf". A generation's selection sorts twice the population
// (non-dominated sorting, pareto.h): O(p log p) with up to two objectives, O(m p^2) for m more;
// each event else costs O(population).
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind nsga2_searcher_kind();

}  // namespace hippo
