// Searchers decide which trials to run and for how long, in the manner of Determined's
// SearchMethod: the master feeds them events and carries out the operations they return. They see
// trials and steps only, never stages: sharing work between trials is the master's business.
//
//   master                         searcher
//   on_study_start()          ->   [Create{0, params}, Train{0, 1872, {468, ...}}, ...]
//   on_validation(0, 468, v)  ->   [Stop{0}] or [Train{0, longer}] or []
//   on_trial_closed(0)        ->   [...; Finish{} once nothing is left]
//
// A trial is closed when it has been trained to its length (or stopped) and its last validation
// has been reported. A searcher's state is a JSON value (save/load), kept in the search plan so
// that a restarted master continues exactly where it stopped.
//
// Searchers are made by name from the study spec. A C++ plug-in adds one with a static
// registrar in a file linked into the binary (not through a static library, whose unreferenced
// objects the linker drops):
//
//   static hippo::SearcherRegistrar reg("my_search", {{"my_option"}, [](const hippo::StudySpec& s)
//   {
//     return std::make_unique<MySearcher>(s); }});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "searchers/field.h"
#include "searchers/space.h"
#include "searchers/spec.h"

namespace hippo {

// A trial's id, chosen by the searcher (the request id of its Create); dense from 0 for built-ins.
using RequestId = int64_t;

// Start a new trial with these values.
// A trial that continues another one (PBT's exploit): its sequences equal the donor's before
// `step` and follow its own params from `step` on, so it shares the donor's stages up to there.
struct Fork {
  RequestId donor = 0;
  int64_t step = 0;
  bool operator==(const Fork&) const = default;
};
// Start a new trial with these values (optionally forked from a donor).
struct Create {
  RequestId trial = 0;
  Params params;
  std::optional<Fork> fork;
  bool operator==(const Create&) const = default;
};
// Train the trial up to step `length` (a trial's length only grows), evaluating the metric at
// each of `eval_steps` (increasing, each <= length).
struct Train {
  RequestId trial = 0;
  int64_t length = 0;
  std::vector<int64_t> eval_steps;
  bool operator==(const Train&) const = default;
};
// Train the trial no further; it closes once its pending evaluations are reported.
struct Stop {
  RequestId trial = 0;
  bool operator==(const Stop&) const = default;
};
// The study is over.
struct Finish {
  bool operator==(const Finish&) const = default;
};
using Operation = std::variant<Create, Train, Stop, Finish>;

// One evaluation of a trial as a searcher sees it (docs/spec.md, "Several objectives").
struct Evaluation {
  // Each objective's value, in the spec's order (a diverged trial's: the worst of each mode).
  std::vector<double> values;
  // How far the study's constraints are from holding there (pareto.h); 0: feasible.
  double violation = 0;
  // What a searcher of one objective sees: the first objective's value, or the worst value of its
  // mode when a constraint fails (an infeasible trial is never better than a feasible one).
  double value = 0;
  bool operator==(const Evaluation&) const = default;
};

class Searcher {
 public:
  virtual ~Searcher() = default;

  virtual std::vector<Operation> on_study_start() = 0;
  virtual std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) = 0;
  // The master calls this one; a searcher of several objectives overrides it, the others see
  // on_validation with the evaluation's single value.
  virtual std::vector<Operation> on_evaluation(RequestId trial, int64_t step, const Evaluation& e) {
    return on_validation(trial, step, e.value);
  }
  virtual std::vector<Operation> on_trial_closed(RequestId trial) = 0;
  // The trial failed (its trainer crashed or reported no metric); it will get no more events.
  virtual std::vector<Operation> on_trial_failed(RequestId trial) = 0;

  virtual nlohmann::json save() const = 0;
  // Replaces the state with a saved one; throws SpecError naming what is wrong in it.
  virtual void load(const nlohmann::json& state) = 0;
  // Whether load(save()) followed by the events fed after that save (the same calls, in the same
  // order) leaves exactly the state the searcher had: the master then saves the whole state only
  // now and then and journals the events in between (master/study_driver.h). A searcher whose
  // decisions depend on anything else (a process of the user's, the clock) says false and is
  // saved whole after every event.
  virtual bool replays_exactly() const { return true; }

  // Operations held back because there were too many to give at once (grid and random give their
  // trials kTrialBatch at a time, so that a large study enters the plan between other work): the
  // driver asks for them until none are left. None by default.
  virtual std::vector<Operation> next_batch() { return {}; }
  // The most trials it will ever create, when it knows (budget.h checks it against the master's
  // limit before the study starts); nullopt when only its own decisions will tell.
  virtual std::optional<uint64_t> most_trials() const { return std::nullopt; }

  // Whether its proposals learn from evaluations (tpe, gp, cmaes, and a scheduler whose sampler
  // is one of them): the spec's warm start seeds it; the spec parser refuses one for the others.
  virtual bool learns() const { return false; }
  // `hippo enqueue`: a configuration (checked against the space) given while the study runs,
  // the next trial it creates, before its own proposals; the operations that creates now (none
  // while `parallel` trials are in flight). It is part of the saved state. Throws
  // std::invalid_argument, changing nothing, when the searcher takes none (the default) or has
  // no trial left to give it.
  virtual std::vector<Operation> enqueue(const Params& params);
};

// Trials a searcher that holds them back gives per batch (next_batch).
inline constexpr uint64_t kTrialBatch = 256;

// How to make one kind of searcher.
struct SearcherKind {
  // The option names it reads from the spec's `searcher` object, besides name, metric, mode,
  // objectives, constraints and max_trials (the spec parser refuses any other).
  std::vector<std::string> options;
  // Makes it for a study; validates the values of its options (throws SpecError).
  std::function<std::unique_ptr<Searcher>(const StudySpec&)> make;
  // Whether it takes a spec of several objectives (its on_evaluation reads every value); the spec
  // parser refuses several objectives for the others.
  bool several_objectives = false;
  // Whether its first trials are the spec's `enqueue` (StudySpec::enqueued); the spec parser
  // refuses `enqueue` for the others.
  bool takes_enqueued = false;
};

// Adds a searcher name; throws std::invalid_argument if the name is taken.
void register_searcher(const std::string& name, SearcherKind kind);
struct SearcherRegistrar {
  SearcherRegistrar(const std::string& name, SearcherKind kind) {
    register_searcher(name, std::move(kind));
  }
};

// The kind of searcher `name` names; fails at `name` when it is not registered.
const SearcherKind& searcher_kind(const Field& name);
// The searchers that take several objectives, for messages: "external, grid, ...".
std::string searchers_of_several_objectives();
std::unique_ptr<Searcher> make_searcher(const StudySpec& spec);

// The cluster used by default: a spec whose searcher reads `parallel` (the trials it keeps in
// flight) and leaves it out, with searcher.parallel = max(1, workers) written in; any other spec
// (a malformed one too: parse_spec says what is wrong) as it is. Resolved once, when a study is
// submitted (`run`: its workers; `submit`: the master's then), and kept in the stored spec, so
// that a restart replays the same events; a spec stored without it keeps the old default, 2.
nlohmann::json with_parallel(const nlohmann::json& spec, int64_t workers);
// The `parallel` a searcher spec gives, if any (a stored spec's, for resume and the master's log).
std::optional<int64_t> parallel_of(const nlohmann::json& spec);

}  // namespace hippo
