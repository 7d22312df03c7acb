// Trained states kept in memory under the master's state ids, most recently used first, so that
// a child stage forks from its parent without reading a checkpoint (DESIGN.md, "Scheduling":
// the master prefers a worker that holds the parent). The master learns which ids a worker holds
// from its hello, done, failed and abandoned messages.
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
  void clear() { entries_.clear(); }
  // The ids held, most recently used first.
  std::vector<int64_t> ids() const;

 private:
  size_t capacity_;
  std::list<std::pair<int64_t, TrainState>> entries_;
};

}  // namespace hippo::worker
