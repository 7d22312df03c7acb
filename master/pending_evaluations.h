// The evaluations that trials wait for, indexed by the state they evaluate (StateKey: the stage
// that makes it and the step), so that a metric finds the trials that wait for it, and the
// scheduler a stage's evaluations, without walking every trial. A split moves the keys above its
// point to the upper stage, as StateRegistry::on_split moves states.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "master/state_registry.h"
#include "stagetree/tree.h"

namespace hippo::master {

class PendingEvaluations {
 public:
  using Index = std::map<StateKey, std::set<TrialId>>;

  // The trial waits for its state after `step` steps (on the tree as it is now).
  void add(const StageTree& tree, TrialId trial, int64_t step) {
    const StateKey key = state_key(tree, trial, step);
    index_[key].insert(trial);
    if (trained_past(tree, key)) trained_.insert(key);
  }
  // It waits no more.
  void remove(const StageTree& tree, TrialId trial, int64_t step) {
    const StateKey key = state_key(tree, trial, step);
    auto it = index_.find(key);
    if (it == index_.end()) return;
    it->second.erase(trial);
    if (!it->second.empty()) return;
    index_.erase(it);
    trained_.erase(key);
  }
  // The trials that wait for the state `key` (none: an empty set).
  const std::set<TrialId>& waiting(const StateKey& key) const {
    static const std::set<TrialId> kNone;
    auto it = index_.find(key);
    return it == index_.end() ? kNone : it->second;
  }
  // The states of `stage` with steps in [from, to] that some trial waits for, by step.
  std::pair<Index::const_iterator, Index::const_iterator> of_stage(StageId stage, int64_t from,
                                                                   int64_t to) const {
    return {index_.lower_bound({stage, from}), index_.upper_bound({stage, to})};
  }
  // Of those, the states that have been trained already (their stage trained past them): an
  // evaluation can start at once, unless a job under way makes it. Kept as the tree changes, so
  // that a decision looks at these only.
  const std::set<StateKey>& trained() const { return trained_; }
  bool empty() const { return index_.empty(); }

  // The stage's trained_until grew (StageTree::mark_trained).
  void on_progress(const StageTree& tree, StageId stage) {
    auto [first, last] = of_stage(stage, INT64_MIN, tree.stage(stage).trained_until);
    for (auto it = first; it != last; ++it)
      if (trained_past(tree, it->first)) trained_.insert(it->first);
  }
  // The tree split `split.stage` at `split.at` (call after the split): the states above it are
  // the upper stage's now, and the one at the point may now be at the end of a trained stage.
  void on_split(const StageTree& tree, const Split& split) {
    move_above(index_, split, [&](const StateKey& key, const std::set<TrialId>&) {
      if (trained_.erase(key)) trained_.insert({split.upper, key.second});
    });
    const StateKey at{split.stage, split.at};
    if (index_.count(at) && trained_past(tree, at)) trained_.insert(at);
  }
  void clear() {
    index_.clear();
    trained_.clear();
  }

 private:
  // Whether the state has been trained: its stage trained past its step (or up to it, at the
  // stage's end).
  static bool trained_past(const StageTree& tree, const StateKey& key) {
    const Stage& x = tree.stage(key.first);
    return x.trained_until > key.second || (x.trained_until == key.second && key.second == x.end);
  }

  Index index_;
  std::set<StateKey> trained_;
};

}  // namespace hippo::master
