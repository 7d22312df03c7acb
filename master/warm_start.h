// A study's warm start resolved from the search plan when it is submitted: the spec's
// `warm_start.studies` (searchers/spec.h) become `warm_start.evaluations`, every trial of those
// studies with an evaluation of the study's metric, its params cut to the new study's leaves.
// They are stored with the spec, so that a restart, or a `hippo checkpoints --forget` of an
// earlier study, feeds the searcher exactly what it saw when it started.
//
// How a space that differs is handled:
// - the earlier study must have the same metric and mode (its first objective): another is an
//   error, as is an unknown study, this study itself, or one named twice;
// - every leaf of the new study must be a leaf of the earlier one (a leaf it did not search has
//   no value to learn from: an error naming it); leaves only the earlier study had are dropped;
// - a trial whose values lie outside the new space (a range narrowed, a choice dropped) is left
//   out and counted (`left_out`);
// - a study that leaves no evaluation inside the space is an error: it cannot mean anything.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "searchers/spec.h"
#include "storage/plan.h"

namespace hippo::master {

// What one earlier study gave.
struct PriorStudy {
  std::string name;
  int64_t trials = 0, evaluations = 0;
  int64_t left_out = 0;  // trials outside the new space
};

struct WarmStart {
  nlohmann::json spec;  // as stored: with warm_start.evaluations
  std::vector<PriorStudy> studies;
};

// `spec` parsed from `spec_json`, resolved against `plan`; the spec as it is without a warm start.
// Throws SpecError naming the field (warm_start.studies[i]) for bad input.
WarmStart resolve_warm_start(const StudySpec& spec, const nlohmann::json& spec_json,
                             SearchPlan& plan);

// A stored spec as it was written: without warm_start.evaluations (what `hippo run --resume`
// compares with the spec file).
nlohmann::json as_written(const nlohmann::json& stored);

}  // namespace hippo::master
