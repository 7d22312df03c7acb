// The stage tree: every trial of every study, merged so that each step that several trials share
// is a step of exactly one stage. Pure data structure, no I/O.
//
// Shape. Trials are grouped by root key (everything that changes training but is not a sequence).
// Under one root key the top stages all start at step 0, one per distinct set of values at step 0.
// A stage [start, end) has children that all start at `end`, one per distinct set of values at
// `end`; any two trials in different children diverge exactly at `end`. A trial is a path from a
// top stage to the stage that holds its last step (length - 1).
//
// Canonical form. The stages depend only on the set of (trial, length) pairs, not on the order they
// were added in: a stage boundary sits at step d exactly when two trials that both need step d
// (length > d) diverge at d. A leaf stage ends at the largest length of the trials that end in it.
//
// Representative. Each stage names one trial that needs all of [start, end); its sequences give
// the values the stage trains with (every other trial through the stage has the same values there).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "stagetree/sequence.h"

namespace hippo {

using TrialId = int64_t;
using StageId = int64_t;  // dense, from 0, in creation order
inline constexpr StageId kNoStage = -1;

struct Stage {
  StageId id = kNoStage;
  StageId parent = kNoStage;  // kNoStage for a top stage (start == 0)
  std::string root_key;
  int64_t start = 0;
  int64_t end = 0;
  int64_t trained_until = 0;      // steps [start, trained_until) have been trained
  TrialId representative = -1;    // a trial with length >= end that passes through this stage
  std::vector<StageId> children;  // all start at `end`, in creation order

  int64_t steps() const { return end - start; }
  int64_t pending_steps() const { return end - trained_until; }
  bool operator==(const Stage&) const = default;
};

struct TrialRecord {
  TrialId id = -1;
  std::string root_key;
  Hyperparams hyperparams;
  int64_t length = 0;  // the trial needs steps [0, length)
  bool operator==(const TrialRecord&) const = default;
};

// A split made while adding or extending a trial: `stage` now ends at `at`; `upper` is a new stage
// [at, old end) that took over the old children, the trained progress above `at`, and the
// representative. The master uses this to tell a running worker to snapshot at `at`.
struct Split {
  StageId stage = kNoStage;
  StageId upper = kNoStage;
  int64_t at = 0;
};

struct Change {
  std::vector<Split> splits;
  std::vector<StageId> created;   // new stages (uppers of splits included)
  std::vector<StageId> extended;  // leaves whose end grew
};

struct TreeCounts {
  int64_t trials = 0;
  int64_t stages = 0;
  int64_t steps_unique = 0;         // sum of stage lengths
  int64_t steps_trial_based = 0;    // sum of trial lengths
  int64_t critical_path_steps = 0;  // longest root-to-leaf path (= the longest trial)
  int64_t steps_trained = 0;        // sum of trained progress over stages
};

class StageTree {
 public:
  StageTree() = default;
  // Copies rebuild the internal indexes (they point into the tree's own containers).
  StageTree(const StageTree& other);
  StageTree& operator=(const StageTree& other);
  StageTree(StageTree&&) = default;
  StageTree& operator=(StageTree&&) = default;

  // Adds a new trial needing steps [0, length), length >= 1. Throws std::invalid_argument for a
  // duplicate id, a bad length, or hyper-parameter names that differ from other trials of the
  // same root key.
  Change add_trial(TrialId id, const std::string& root_key, Hyperparams hyperparams,
                   int64_t length);
  // Raises a trial's length (a searcher asking for more steps). A length <= the current is a no-op.
  Change extend_trial(TrialId id, int64_t length);
  // Records training progress: trained_until = max(trained_until, min(until, end)).
  void mark_trained(StageId stage, int64_t until);

  const Stage& stage(StageId id) const { return stages_.at(id); }
  const std::vector<Stage>& stages() const { return stages_; }
  const TrialRecord& trial(TrialId id) const { return trials_.at(id); }
  const std::map<TrialId, TrialRecord>& trials() const { return trials_; }
  bool has_trial(TrialId id) const { return trials_.count(id) != 0; }

  // The stages a trial passes through, top stage first; the last one holds step length - 1.
  std::vector<StageId> path(TrialId id) const;
  // The stage on the trial's path that produces the state after `step` steps: the one with
  // start < step <= end (the top stage for step 0).
  StageId stage_at(TrialId id, int64_t step) const;
  // Top stages, in creation order, of every root key.
  std::vector<StageId> top_stages() const;
  // Every stage, each before its descendants (walked backwards: each after its descendants).
  std::vector<StageId> parents_first() const;
  // Trials whose last step lies in this stage (length in (start, end]).
  const std::vector<TrialId>& trials_ending_in(StageId id) const;

  TreeCounts counts() const;

  // How far a trial's path has been trained from step 0 without a gap (at most its length).
  int64_t trained_length(TrialId id) const;
  // For every stage that some trial needs, each up to its own length in `lengths` (trial ->
  // steps, at most its length): the end up to which it is needed.
  std::unordered_map<StageId, int64_t> needed_ends(const std::map<TrialId, int64_t>& lengths) const;
  // Raises `ends` (as needed_ends gives them) for one more trial needing `length` steps.
  void raise_needed_ends(std::unordered_map<StageId, int64_t>& ends, TrialId id,
                         int64_t length) const;
  // The steps of needed_ends(lengths): `unique` counts every stage's needed part once, `trained`
  // what of that is trained. A study's steps_unique and its progress.
  struct NeededSteps {
    int64_t unique = 0;
    int64_t trained = 0;
  };
  NeededSteps needed_steps(const std::map<TrialId, int64_t>& lengths) const;

  // Rebuilds a tree from stored stages and trials (as returned by stages() and trials()).
  // Throws std::invalid_argument if they are inconsistent.
  static StageTree restore(std::vector<Stage> stages, std::vector<TrialRecord> trials);

 private:
  // What the tree keeps per trial besides its record: the record's sequences in name order (the
  // map's nodes never move, so the pointers stay valid) and the stage that holds its last step.
  struct TrialState {
    const TrialRecord* record = nullptr;
    std::vector<const Sequence*> seqs;
    StageId last_stage = kNoStage;
  };

  // Key of the child of `parent` (or, for kNoStage, the top stage of `root_key`) that holds the
  // values of `seqs` at `step`: every value's bits, in name order.
  static std::string child_key(StageId parent, const std::string& root_key,
                               const std::vector<const Sequence*>& seqs, int64_t step);
  // The key under which stage `id` is indexed, from its representative's values at its start.
  std::string stage_key(StageId id) const;
  void check_names(const TrialRecord& trial) const;
  TrialState& add_record(TrialRecord record);
  // Creates the state of a record already stored in trials_.
  TrialState& index_record(const TrialRecord& stored);
  StageId new_stage(StageId parent, int64_t start, int64_t end, const TrialState& representative,
                    Change& change);
  void end_in(TrialState& trial, StageId stage);
  // Cuts `id` at `at` (start < at < end); the upper part becomes a new stage.
  void split(StageId id, int64_t at, Change& change);
  // Walks the trial down from stage `id`, whose values it is known to share over [start, checked),
  // splitting, extending or creating stages until its last step has a stage.
  void place(TrialState& trial, StageId id, int64_t checked, Change& change);

  std::vector<Stage> stages_;
  std::vector<const TrialState*> rep_;           // by stage: its representative
  std::vector<std::vector<TrialId>> ending_in_;  // by stage
  std::map<TrialId, TrialRecord> trials_;
  std::unordered_map<TrialId, TrialState> state_;
  std::unordered_map<std::string, StageId> child_index_;  // child_key() -> stage
  std::unordered_map<std::string, TrialId> root_trial_;   // root key -> its first trial (names)
};

}  // namespace hippo
