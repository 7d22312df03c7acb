// Trained states kept in memory under the master's state ids, most recently used first, so that
// a child stage forks from its parent without reading a checkpoint (the scheduler:
// the master prefers a worker that holds the parent). The master learns which ids a worker holds
// from its hello, done, failed and abandoned messages. A long-lived external trainer keeps its own
// states; their ids are listed here too, so that the master's preference applies to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <utility>
#include <vector>

#include "worker/engine/train_state.h"

namespace hippo::worker {

class StateCache {
 public:
  explicit StateCache(size_t capacity) : capacity_(capacity) {}
  // The state, which becomes the most recently used; null if it is not held.
  const TrainState* find(int64_t id);
  // Keeps a copy (one copy per buffer); the least recently used state goes when full.
  void put(int64_t id, const TrainState& state);
  void clear() {
    entries_.clear();
    trainer_states_.clear();
  }
  // The ids held, most recently used first, then those of the trainer's states.
  std::vector<int64_t> ids() const;

  // The states that a long-lived external trainer holds in its own memory (external_trainer.h):
  // reported with ours, forgotten by clear().
  void set_trainer_states(std::vector<int64_t> ids) { trainer_states_ = std::move(ids); }
  const std::vector<int64_t>& trainer_states() const { return trainer_states_; }

 private:
  size_t capacity_;
  std::list<std::pair<int64_t, TrainState>> entries_;
  std::vector<int64_t> trainer_states_;
};

}  // namespace hippo::worker
