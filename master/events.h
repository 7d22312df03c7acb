// A study's events as JSON lines, as it runs (`hippo run --events FILE`, `hippo master --events
// FILE`): a study started, a trial started (its params), an evaluation (its metrics), a trial
// ended (its status and step), the best value so far, a study ended (its status and why).
// docs/spec.md ("Events") gives each line's fields.
//
// The lines come from the master's one applier (Master::apply): after each operation is applied,
// `after` reads what it changed from the study driver, never from inside a decision. They are
// kept until the transaction that applied them commits (`commit` writes them; `discard` drops
// those of a transaction that failed), so a line never tells of a change the plan does not hold.
#pragma once

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "master/edit.h"

namespace hippo::master {

class StudyDriver;

class EventStream {
 public:
  // Appends to the file at `path` ("-": standard output); std::runtime_error naming it when it
  // cannot be opened.
  explicit EventStream(const std::string& path);
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // The lines that `op`, just applied, makes (none for most operations).
  void after(const EditOp& op, const StudyDriver& driver);
  // The transaction committed: its lines are written and flushed.
  void commit();
  // The transaction failed: its lines are dropped.
  void discard() { pending_.clear(); }

 private:
  void emit(const StudyDriver& driver, int64_t study, const char* event, nlohmann::json fields);

  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::vector<std::string> pending_;
  std::set<TrialId> running_;       // trials started and not ended since
  std::set<TrialId> started_;       // trials that started once (a later start continues them)
  std::map<int64_t, double> best_;  // by study: its objective's best finite value so far
  std::set<int64_t> ended_;         // studies whose end was told
};

}  // namespace hippo::master
