// A study spec (docs/spec.md, "Study spec"), parsed and validated. Everything that can be wrong in
// a spec is found here, before any trial exists, and reported as a SpecError whose message starts
// with the JSON path of the offending field.
//
// Steps per epoch (U) are floor(train_samples / batch_size) for each trial: a batch size drawn from
// a distribution gives each trial its own U; a batch size that follows a schedule makes `epoch`
// units an error.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "searchers/field.h"
#include "searchers/space.h"
#include "stagetree/sequence.h"

namespace hippo {

// A length or an evaluation interval: {"steps": N} or {"epochs": E}.
struct Span {
  int64_t count = 0;
  bool epochs = false;

  int64_t steps(int64_t steps_per_epoch) const { return epochs ? count * steps_per_epoch : count; }
};

struct DataSpec {
  std::string name;  // "fashion-mnist", or "fortunes" (gpt); any name for an external model
  // Prefixes of the splits; by default all of them (fortunes: the windows of the model's context).
  // 0 for an external model's own data set that does not give them (lengths must be in steps).
  int64_t train_samples = 60000;
  int64_t eval_samples = 10000;
  // An external model's other data fields, as written: passed to its trainer as they are; for
  // fortunes, {"tokenizer": "bpe32k"} when the spec names it (absent: characters).
  nlohmann::json fields = nlohmann::json::object();
};

// "pipeline": how the gpt model is cut into stages that run in a pipeline (pipeline/). Only
// `microbatches` changes the arithmetic (one optimizer step accumulates the gradients of M
// micro-batches), so only it belongs to the root key; stages, schedule and chunks change where and
// in which order the work runs, never the results.
struct PipelineSpec {
  int stages = 1;  // 1: no pipeline
  int microbatches = 1;
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, bpipe
  int chunks = 1;                 // model chunks per stage (interleaved)
  // The embedding and output layer cut by vocabulary across the stages: the same results, so
  // not part of the root key.
  bool vocab_parallel = false;
};

// A metric a study optimizes and its direction.
struct Objective {
  std::string metric;  // for built-in models "accuracy", "loss" or "params"
  bool maximize = true;
  bool operator==(const Objective&) const = default;
};

// A bound a feasible trial's metric keeps at its last evaluation (min and/or max, inclusive).
struct Constraint {
  std::string metric;
  std::optional<double> min, max;
  // How far `value` is outside the bounds (0 inside; infinite when it is not finite).
  double violation(double value) const;
  bool operator==(const Constraint&) const = default;
};

// What a study optimizes (docs/spec.md, "Several objectives"): `metric` and `mode`, or
// `objectives`; and `constraints`.
struct Goals {
  std::vector<Objective> objectives;  // at least one, metrics distinct
  std::vector<Constraint> constraints;
  bool several() const { return objectives.size() > 1; }
  // Whether the spec says `objectives` or `constraints`: a searcher event then carries every
  // value (storage/plan.h); a spec of one metric and mode keeps the single value it had.
  bool multi() const { return several() || !constraints.empty(); }
  std::vector<bool> directions() const;  // maximize, by objective
  // The metrics an evaluation must report: the objectives', then the constraints' (each once).
  std::vector<std::string> metrics() const;
};

inline constexpr size_t kMaxObjectives = 8, kMaxConstraints = 16;

struct SearcherSpec {
  std::string name;  // a registered searcher (searchers/searcher.h)
  Goals goals;
  // The first objective's metric and direction: all that a searcher of one objective reads.
  std::string metric;
  bool maximize = true;
  std::optional<int64_t> max_trials;
  nlohmann::json options = nlohmann::json::object();  // the searcher's own options, as written
};

// A trial of an earlier study, as a warm start sees it: its params (the new study's leaves only,
// each in the new study's space) and its finite values of the study's metric, step -> value.
struct PriorTrial {
  std::string study;
  int64_t trial = 0;  // its number in that study
  Params params;
  std::map<int64_t, double> values;
};

struct StudySpec {
  std::string name;
  // As written (gpt: with every field); type mlp, cnn, gpt or external (command, and long_lived:
  // the trainer serves many stages, worker/README.md). A built-in model's fields may be
  // distributions (model leaves of `space`): then it is as written, distributions in place, and
  // model_of gives a trial's.
  nlohmann::json model;
  DataSpec data;
  uint64_t seed = 0;
  // Settings that every trial shares: name -> number, string or boolean, with `betas` expanded
  // and, for built-in models, every default of stagetree/settings.h filled in.
  nlohmann::json fixed = nlohmann::json::object();
  SearchSpace space;
  SearcherSpec searcher;
  Span length;  // unless length_end_of is set
  // `"length": {"end_of": NAME}`: each trial trains until its wsd schedule NAME's cooldown ends.
  std::string length_end_of;
  std::optional<Span> eval_every;  // none: evaluate at the end only
  PipelineSpec pipeline;
  // `budget`: {"steps": N} ends the study (done, saying so) at its first event once its trials have
  // trained N steps (the study's account), {"wall_s": T} once T seconds have passed since it was
  // submitted (its wall time: simulated seconds under `simulate`). It is no part of the root key.
  std::optional<int64_t> budget_steps;
  std::optional<double> budget_wall_s;
  // `enqueue`: given params (a value for every leaf) that are the study's first trials, 0, 1, ...,
  // before the searcher's own (random, sobol and the pool and halving searchers; the others
  // refuse them).
  std::vector<Params> enqueued;
  // `warm_start`: {"studies": [NAME, ...]}: earlier studies of the same plan whose evaluations
  // seed the searcher's sampler (sampler.h: tpe, gp, cmaes, alone or inside a scheduler; the spec
  // parser refuses it for searchers that learn nothing). The master reads them from the plan when
  // the study is submitted (master/warm_start.h) and stores them in the spec as
  // `warm_start.evaluations` (`prior`), so that a restart, or a later `--forget` of those
  // studies, feeds the searcher exactly what it saw.
  std::vector<std::string> warm_start;
  std::vector<PriorTrial> prior;
  // Why lengths in epochs are refused (no batch size constant within a trial, or an external
  // data set without train_samples); empty when they are possible.
  std::string no_epochs;
  // A stable hash (16 hex digits) of model, data, seed, fixed and the hyper-parameter names: trials
  // of studies with the same root key can share stages. With model leaves, the model is hashed
  // as written, so no trial has this key: each architecture has its own (root_key_of).
  std::string root_key;
  // Root key -> the model of the trials that have it: one entry per architecture (the product of
  // the model leaves' values; at most kMaxArchitectures), one without model leaves.
  std::map<std::string, nlohmann::json> architectures;

  bool external_model() const { return model.at("type") == "external"; }
  // An external model whose trainer serves many stages (model.long_lived).
  bool long_lived_trainer() const { return external_model() && model.value("long_lived", false); }
  // U for a trial with these params; 0 when the study has no batch size that is constant within
  // a trial (epoch units are refused then).
  int64_t steps_per_epoch(const Params& params) const;
  int64_t length_steps(const Params& params) const;
  // Whether every trial has the same length (no length.end_of).
  bool one_length() const { return length_end_of.empty(); }
  // The latest a wsd schedule NAME (a top-level hyper-parameter) may end its cooldown over its
  // leaves' ranges: the largest decay_start plus the largest decay, in the schedule's unit.
  Span latest_cooldown_end(const std::string& name) const;
  // The longest a trial may be: the fixed length, or with length.end_of its latest cooldown end.
  Span longest_length() const;
  // The steps to evaluate at, increasing: every eval_every up to the length, and the length.
  std::vector<int64_t> eval_steps(const Params& params) const;
  // Checks that params give every leaf a value in its range (and nothing else): SpecError naming
  // the leaf, as a spec's `enqueue` entries and `hippo enqueue` are checked.
  void check_params(const Params& params) const;
  // The trial's sequences (SearchSpace::instantiate with the trial's U); model leaves are none.
  Hyperparams hyperparams(const Params& params) const;
  // The trial's model: `model` with its values of the model leaves, as parse_spec would make a
  // model written with them (gpt: with every field). SpecError naming the leaf for params that
  // miss one or have one out of range.
  nlohmann::json model_of(const Params& params) const;
  // The trial's root key: root_key's hash over model_of(params), so that trials share stages
  // within their architecture only. Equal to root_key without model leaves.
  std::string root_key_of(const Params& params) const;
  // The model of the architecture whose root key this is; std::invalid_argument when the spec has
  // none with it.
  const nlohmann::json& model_with_root_key(const std::string& key) const;
};

// The most architectures a spec may have: each is checked when the spec is parsed, and each is
// a stage tree root of its own.
inline constexpr uint64_t kMaxArchitectures = 4096;

// Whether metric value a is better than b for a study that maximizes (or minimizes) it.
inline bool better(double a, double b, bool maximize) {
  return maximize ? a > b : a < b;
}

// What a study optimizes, read from a spec's searcher exactly as parse_spec reads it (a stored
// spec's, for the history queries); SpecError naming the field.
Goals goals_of(const nlohmann::json& spec);

// A length: {"steps": N} or {"epochs": E} (the spec's length and evaluation interval, and the
// length options of searchers).
Span parse_span(const Field& f);

// Validates a spec; throws SpecError. It also makes the searcher once, to validate its options.
StudySpec parse_spec(const nlohmann::json& spec);
// The same from JSON text (see parse_json_text for what is refused before parsing).
StudySpec parse_spec_text(std::string_view text);
// The same from a file; a file that cannot be read is a SpecError "<file>: cannot read: <why>".
StudySpec load_spec(const std::string& path);

}  // namespace hippo
