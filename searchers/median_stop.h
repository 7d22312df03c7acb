// `median_stop` (Optuna's MedianPruner rule), a pool searcher (pool_searcher.h).
//
// Trials are the grid points when the space has grid leaves (max_trials defaults to their
// number), else seeded draws (max_trials required), `parallel` of them in flight (default: the
// workers, with_parallel). At an evaluation step s after `grace` (a length, default the first
// evaluation step), once at least `min_trials` (default 5) trials have completed (trained to their
// length: stopped, failed and diverged ones do not count), a trial whose best value so far is worse
// than the median of the completed trials' values at s gets Stop; one whose values so far are all
// NaN too. That is Optuna's MedianPruner (n_startup_trials = min_trials, n_warmup_steps = grace +
// 1, n_min_trials = 1) and Vizier's median stopping rule. The last step is never judged: the trial
// is trained by then, there is nothing left to save.
//
// Optuna's other pruning options, each off by default (so that a spec without them decides as
// before):
//   percentile  (default 50) Optuna's PercentilePruner: the median above is this percentile of
//               the completed trials' values in the direction of the mode (a trial is stopped
//               when its best is worse than it: 25 keeps the best quarter), interpolated linearly
//   interval    a length: Optuna's interval_steps, judged only at a trial's first evaluation at
//               or after grace + 1 + k * interval
//   patience    an integer >= 0, Optuna's PatientPruner around the rule (min_delta 0): a trial is
//               judged by the percentile rule only once the best of its last patience + 1
//               evaluations is worse than its best before them
//   threshold   {"lower", "upper"} (either or both), Optuna's ThresholdPruner: a trial whose value
//               at a judged step is outside them is stopped, whatever the completed trials
#pragma once

#include "searchers/searcher.h"

namespace hippo {

SearcherKind median_stop_searcher_kind();

}  // namespace hippo
