// What one study may ask of a master, so that no spec can stall or exhaust it (README, "Limits").
// The master checks a spec against its budget when the spec is submitted (`hippo run` and
// `preview` likewise, against their own options), and refuses it with the JSON path of what is too
// large before anything is made; the study driver checks again as the searcher asks (a searcher
// may ask for more than the spec says: an external one, hyperband's brackets).
//
//   trials       the trials one study may create                     (--max-trials)
//   steps        the steps its trials may request in all: the sum of  (--max-steps)
//                their lengths, what a trial-based system would train
//   evaluations  the evaluation steps its trials may request in all   (--max-evaluations)
//
// And, whatever the budget, one trial's job (its sequences and evaluation steps) must fit in a
// message: at most kMaxJobBytes, half the frame limit (protocol/wire.h), which leaves room for
// the snapshot orders that a job carries besides.
#pragma once

#include <cstdint>

#include "searchers/spec.h"

namespace hippo {

struct Budget {
  int64_t trials = 10'000;
  int64_t steps = 10'000'000'000;
  int64_t evaluations = 1'000'000;
};

inline constexpr int64_t kMaxJobBytes = 8 << 20;

// The most steps one trial of the spec can have (its length with the most steps per epoch).
int64_t longest_trial(const StudySpec& spec);
// The most evaluation steps one trial of the spec can have.
int64_t most_evaluations(const StudySpec& spec);
// The bytes of the job that trains a whole trial of the spec: its run spec, sequences and
// evaluation steps (an estimate from the first trial's params, within a few hundred bytes).
int64_t job_bytes(const StudySpec& spec);

// Throws SpecError, naming the field, when the spec would exceed the budget or a trial's job would
// not fit in a message. Allocates nothing in proportion to what it checks.
void check_budget(const StudySpec& spec, const Budget& budget);

}  // namespace hippo
