// The `external` searcher: a process of any language that makes the decisions, spoken to in JSON
// lines over its stdin and stdout (the protocol is in searchers/README.md):
//
//   "searcher": {"name": "external", "command": ["/usr/bin/python3", "my_search.py"],
//                "metric": "accuracy", "mode": "max", "timeout_s": 30}
//
// Each event is one line to the process and exactly one line back; every reply is checked
// strictly (operations, trial ids, params against the spec's space, lengths and evaluation steps).
// A reply that is wrong, late (timeout_s per event, default 60) or missing because the process
// ended throws a std::runtime_error that names the command, the event and the problem; the
// process is then killed and every later call throws the same error.
//
// The process is started by the first "start" or "load" event, not when the searcher is made:
// parse_spec makes a searcher just to validate its options. It ends when the study finishes
// (after its final state is saved) or when the searcher is destroyed: its stdin is closed, it has
// a short grace period to exit, then its process group is killed and it is reaped.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "searchers/searcher.h"

namespace hippo {

class LineProcess;  // external.cc: a child process spoken to in lines

class ExternalSearcher : public Searcher {
 public:
  // Validates the options `command` (a non-empty list of strings) and `timeout_s` (a number in
  // (0, 3600]); throws SpecError. Starts nothing.
  explicit ExternalSearcher(const StudySpec& spec);
  ~ExternalSearcher() override;

  std::vector<Operation> on_study_start() override;
  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override;
  // With objectives or constraints in the spec, the validation event also carries every
  // objective's value and the violation.
  std::vector<Operation> on_evaluation(RequestId trial, int64_t step, const Evaluation& e) override;
  std::vector<Operation> on_trial_closed(RequestId trial) override;
  std::vector<Operation> on_trial_failed(RequestId trial) override;

  // {"state": the process's state, "trials": the params of every trial it created (what a "full"
  // length needs), "finished": whether it said finish (its process has ended then)}.
  nlohmann::json save() const override;
  void load(const nlohmann::json& state) override;
  // The user's process may decide differently when fed the same events again.
  bool replays_exactly() const override { return false; }
  // The spec's max_trials, if any (replies that create more are refused).
  std::optional<uint64_t> most_trials() const override;

  // The process's id while it runs, else -1 (tests check that none outlives its searcher).
  pid_t pid() const;

 private:
  // Sends one event, reads one line back and hands it to `check` (which throws SpecError on what
  // it refuses). Any failure ends the process and throws the runtime_error kept in error_.
  void talk(const nlohmann::json& event,
            const std::function<void(const Field& reply)>& check) const;
  nlohmann::json study_event(const char* name) const;  // "start" or "load": the study described
  std::vector<Operation> operations(const nlohmann::json& event);
  Operation operation(const Field& op);
  RequestId known_trial(const Field& trial) const;
  nlohmann::json trial_event(const char* name, RequestId trial) const;
  nlohmann::json validation_event(RequestId trial, int64_t step, double value) const;

  StudySpec spec_;
  std::vector<std::string> command_;
  std::string label_;  // `external searcher "<command>"`, the start of every error
  double timeout_s_ = 60;
  std::vector<Params> trials_;                 // by trial id
  std::optional<nlohmann::json> final_state_;  // set when the searcher finished
  // The conversation with the process; save() is part of it, hence mutable.
  mutable std::unique_ptr<LineProcess> process_;
  mutable std::string error_;  // the first failure; every later call throws it again
};

SearcherKind external_searcher_kind();

}  // namespace hippo
