// The search space of a study: for each hyper-parameter a constant, a distribution, or a schedule
// whose numeric fields may each be a number or a distribution. Every distribution is a *leaf*
// with a flat name: "weight_decay" for a top-level distribution, "lr.init", "lr.milestones[0]",
// "lr.after.init", "lr.points[2][1]" inside schedules. A trial's Params give one value per leaf;
// instantiate() turns them into the trial's sequences.
//
// Leaves are ordered by hyper-parameter name, then by the schedule's field order as docs/spec.md
// lists it (multistep: init, milestones, gamma), then by list position; the model's leaves
// ("model.hidden": a field of a built-in model given as a distribution, an architecture) come
// last, by field name. Grid points are numbered with the first grid leaf varying fastest, so
// architectures vary slowest. Sampling is a pure function of (seed, counter, leaf),
// so the same seed always gives the same trials and a searcher only has to remember its counter.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "searchers/field.h"
#include "stagetree/sequence.h"

namespace hippo {

// The schedules of docs/spec.md and their fields, as the parser reads them: one table, also walked
// by the tests (every numeric field of every schedule may be a number or a distribution).
struct ScheduleField {
  enum Kind {
    kValue,       // a value of the setting (init, final, a point's value)
    kFactor,      // gamma
    kUnits,       // a length in units (every, length, warmup): an integer >= 1
    kUnitsFrom0,  // a length that may be 0 (wsd's warmup and decay_start)
    kUnitsList,   // milestones: a list of lengths
    kPoints,      // [[start, value], ...]: starts are integers from 0, increasing
    kAfter,       // a nested schedule
    kShape,       // wsd's cooldown shape: "linear", "cosine" or "1-sqrt"
  };
  std::string_view name;
  Kind kind;
};
struct ScheduleShape {
  std::string_view name;
  std::vector<ScheduleField> fields;
  bool integer_ok;  // may shape an integer setting (its values stay integral)
};
const std::vector<ScheduleShape>& schedule_shapes();

// Whether a hyper-parameter's value, as written, is a `wsd` schedule.
bool is_wsd_schedule(const nlohmann::json& value);

// A trial's values: an object, flat leaf name -> number or string (a model leaf's value is any
// value its field takes: a list of widths, say).
using Params = nlohmann::json;

enum class DistKind { kGrid, kChoice, kUniform, kLogUniform, kInt };

// One distribution leaf.
struct Param {
  std::string name;  // flat name, e.g. "lr.milestones[0]"
  DistKind kind = DistKind::kGrid;
  std::vector<nlohmann::json> values;  // grid, choice: the candidates, in spec order
  double lo = 0, hi = 0;               // uniform, loguniform: [lo, hi); int: [lo, hi] inclusive
  size_t hyperparam = 0;               // index into SearchSpace::names(); kModelLeaf for a model's
  nlohmann::json::json_pointer where;  // the leaf's place inside its hyper-parameter's value (or
                                       // inside the model)

  static constexpr size_t kModelLeaf = SIZE_MAX;
  // A field of the model ("model.hidden"): the trial's architecture, not a sequence.
  bool in_model() const { return hyperparam == kModelLeaf; }
  // Whether `value` is one this leaf can take (used to refuse params from outside).
  bool admits(const nlohmann::json& value) const;
};

// A field of a built-in model written as a distribution (`"hidden": {"grid": [[64], [256, 128]]}`):
// a leaf named "model.<key>", grid or choice over any values, or int. Only the distribution's
// form is checked here; each candidate is checked by the model's own rules (spec.cc).
Param model_leaf(const Field& field, const std::string& key);

// How to read the settings of a study.
struct SpaceRules {
  // Names, types and ranges from stagetree/settings.h; else any name and value goes, except that
  // batch_size, which epoch units are computed from, is always the built-in one.
  bool builtin = true;
  std::string no_epochs;  // why `unit: epoch` is refused here; empty when it is allowed
};

// A setting as written under `fixed` or `hyperparameters`, with the alias `betas: [b1, b2]`
// expanded into beta1 and beta2 (their paths stay "<object>.betas[0]" and "<object>.betas[1]").
struct NamedField {
  std::string name;
  Field field;
};
// Sorted by name. Fails on `betas` that is not a list of two, or given together with beta1/beta2.
std::vector<NamedField> setting_fields(const Field& object);

// The `fixed` settings: each must be a constant (schedules and distributions belong under
// `hyperparameters`). Returns name -> value, numbers of integer settings as integers and of other
// built-in settings as doubles, so that equal settings hash equally.
nlohmann::json fixed_settings(const std::vector<NamedField>& fixed, const SpaceRules& rules);

class SearchSpace {
 public:
  SearchSpace() = default;
  // Validates every hyper-parameter (types and ranges, schedule fields, units); throws SpecError.
  SearchSpace(const std::vector<NamedField>& hyperparameters, const SpaceRules& rules);

  const std::vector<std::string>& names() const { return names_; }  // sorted
  const std::vector<Param>& params() const { return params_; }
  // The hyper-parameter's value as written (a number, a string, a boolean, a distribution or a
  // schedule); nullptr when there is no such name.
  const nlohmann::json* value_of(const std::string& name) const;

  // Adds the model's leaves (model_leaf) after the hyper-parameters' leaves, so that the draws of
  // those stay what they are without them.
  void add_model_leaves(std::vector<Param> leaves);
  // Where a leaf is written: "hyperparameters.<its hyper-parameter>", or its model field.
  std::string written_at(const Param& leaf) const;

  // Whether the hyper-parameter `name` is drawn (has a distribution leaf of that name).
  bool draws(const std::string& name) const;
  // The number of grid points: the product of the sizes of the grid leaves (1 without any),
  // saturating at UINT64_MAX.
  uint64_t grid_size() const;
  // One trial's values. With a grid index (< grid_size()), grid leaves take that grid point and
  // every other leaf is drawn; without, every leaf is drawn (a grid leaf like a choice). Draws
  // depend only on (seed, counter, leaf).
  Params draw(uint64_t seed, uint64_t counter, std::optional<uint64_t> grid_index) const;
  // The values at a point of [0, 1)^leaves (one number per leaf, in params() order), each leaf's
  // inverse distribution function: what draw gives for uniform draws (and sobol for its points).
  Params at(const std::vector<double>& point, std::optional<uint64_t> grid_index) const;
  // For the model-based searchers (gp, cmaes) over uniform, loguniform and int leaves: a trial's
  // values as coordinates in [0, 1] (log scale for loguniform; an int's range widened by half a
  // step each side, so each value has an equal share), one per leaf in params() order, and back
  // (rounded and clamped into each leaf's range).
  std::vector<double> unit_coordinates(const Params& params) const;
  Params from_unit_coordinates(const std::vector<double>& u) const;

  // The trial's sequences, every length in steps (`unit: epoch` uses steps_per_epoch); model
  // leaves are no sequence. Throws SpecError naming the leaf when params miss a leaf, have an
  // unknown one, or one out of range.
  Hyperparams instantiate(const Params& params, int64_t steps_per_epoch) const;
  // `model` (as written) with the trial's values of the model leaves in place; SpecError naming
  // the leaf when params miss one or have one out of range.
  nlohmann::json model_with(nlohmann::json model, const Params& params) const;
  // The step at which the `wsd` schedule of hyper-parameter `name` ends its cooldown
  // (decay_start + decay, in steps) for these params (a trial's length with length.end_of).
  int64_t cooldown_end(const std::string& name, const Params& params,
                       int64_t steps_per_epoch) const;

 private:
  std::vector<std::string> names_;
  std::vector<nlohmann::json> values_;  // by name index, as written
  // Hyper-parameter `index` as written with the trial's values in place of its leaves (params
  // already checked).
  nlohmann::json with_params(size_t index, const Params& params) const;
  std::vector<Param> params_;
};

}  // namespace hippo
