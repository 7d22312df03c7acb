#include "worker/state_cache.h"

#include <algorithm>

namespace hippo::worker {

const TrainState* StateCache::find(int64_t id) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->first == id) {
      entries_.splice(entries_.begin(), entries_, it);
      return &entries_.front().second;
    }
  return nullptr;
}

void StateCache::put(int64_t id, const TrainState& state) {
  if (find(id)) {
    entries_.front().second = state;
    return;
  }
  entries_.emplace_front(id, state);
  if (entries_.size() > capacity_) entries_.pop_back();
}

std::vector<int64_t> StateCache::ids() const {
  std::vector<int64_t> out;
  for (const auto& e : entries_) out.push_back(e.first);
  for (int64_t id : trainer_states_)
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

}  // namespace hippo::worker
