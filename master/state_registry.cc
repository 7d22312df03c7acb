#include "master/state_registry.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "master/checkpoint_files.h"

namespace hippo::master {
namespace {}  // namespace

std::string implausible_checkpoint_bytes(int64_t reported, std::optional<int64_t> measured,
                                         std::optional<int64_t> expected, bool external) {
  const std::string said = std::to_string(reported) + " bytes";
  if (reported < 0 || reported > kMaxCheckpointBytes)
    return said + " is beyond the bound of " + std::to_string(kMaxCheckpointBytes) +
           " bytes (kMaxCheckpointBytes)";
  if (measured && *measured != reported)
    return said + ", but the file in the master's directory has " + std::to_string(*measured);
  if (expected && !external && reported != *expected)
    return said + ", but the checkpoints of its root key have " + std::to_string(*expected);
  return "";
}

StateInfo state_of(const CheckpointRow& row, const std::string& own_storage) {
  std::set<std::string> storages(row.storages.begin(), row.storages.end());
  if (storages.empty()) storages.insert(own_storage);
  return {.stage = row.stage,
          .step = row.step,
          .file = row.file,
          .storages = std::move(storages),
          .checkpoint_row = row.id,
          .bytes = row.size,
          .checksum = protocol::content_hash_error(row.checksum).empty() ? row.checksum : "",
          .retained_at = row.retained_at,
          .needed = !row.retained_at,
          .environment = row.environment,
          .provenance = {row.producer, row.lineage}};
}

std::string producer_of(const protocol::PeerIdentity& peer) {
  return peer.anonymous() ? "anonymous" : peer.key;
}

Provenance made_by(const std::string& producer, const Provenance& parent) {
  std::set<std::string> keys;
  std::istringstream in(parent.lineage);
  for (std::string key; in >> key;) keys.insert(key);
  keys.insert(producer);
  std::string lineage;
  for (const std::string& key : keys) lineage += (lineage.empty() ? "" : " ") + key;
  return {producer, lineage};
}

StateRegistry::StateRegistry(std::string incarnation) : incarnation_(std::move(incarnation)) {}

protocol::SnapshotOrder StateRegistry::new_snapshot_order(int64_t step) {
  int64_t state = next_state_++;
  return {step, state, checkpoint_file_name(incarnation_, state)};
}

int64_t StateRegistry::add_restored(const StateInfo& info) {
  int64_t id = next_state_++;
  add(id, info);
  return id;
}

namespace {
bool is_kept(const StateInfo& info) {
  return !info.needed && info.checkpoint_row >= 0;
}
}  // namespace

void StateRegistry::add(int64_t id, const StateInfo& info) {
  if (auto old = states_.find(id); old != states_.end()) {
    bytes_ -= old->second.bytes;
    kept_ -= is_kept(old->second);
  }
  states_[id] = info;
  bytes_ += info.bytes;
  kept_ += is_kept(info);
  index_[{info.stage, info.step}] = id;
}

std::optional<int64_t> StateRegistry::state_at(const StateKey& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::pair<int64_t, int64_t> StateRegistry::nearest_before(const StageTree& tree, TrialId trial,
                                                          int64_t step) const {
  std::vector<StageId> path = tree.path(trial);
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const Stage& x = tree.stage(*it);
    if (x.start >= step) continue;
    auto found = index_.lower_bound(StateKey{x.id, step});
    if (found != index_.begin() && std::prev(found)->first.first == x.id)
      return {std::prev(found)->second, std::prev(found)->first.second};
  }
  return {-1, 0};
}

void StateRegistry::cache_metrics(const StateKey& key, const Measured& measured) {
  metrics_[key] = measured;
}

const Measured* StateRegistry::cached_metrics(const StateKey& key) const {
  auto it = metrics_.find(key);
  return it == metrics_.end() ? nullptr : &it->second;
}

void StateRegistry::on_split(const Split& split) {
  move_above(index_, split, [&](const StateKey&, int64_t id) { states_[id].stage = split.upper; });
  move_above(metrics_, split, [](const StateKey&, const Measured&) {});
}

StateInfo StateRegistry::forget(int64_t id) {
  StateInfo info = states_.at(id);
  index_.erase({info.stage, info.step});
  states_.erase(id);
  bytes_ -= info.bytes;
  kept_ -= is_kept(info);
  return info;
}

void StateRegistry::set_storages(int64_t id, std::set<std::string> storages) {
  states_.at(id).storages = std::move(storages);
}

void StateRegistry::set_needed(int64_t id, bool needed, std::optional<double> retained_at) {
  StateInfo& info = states_.at(id);
  kept_ -= is_kept(info);
  info.needed = needed;
  info.retained_at = retained_at;
  kept_ += is_kept(info);
}

int64_t StateRegistry::deepest_retained(const StageTree& tree, TrialId trial, int64_t up_to) const {
  std::vector<StageId> path = tree.path(trial);
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const Stage& x = tree.stage(*it);
    if (x.start >= up_to) continue;
    // This stage's states up to `up_to`, deepest first.
    auto first = index_.lower_bound(StateKey{x.id, INT64_MIN});
    auto last = index_.upper_bound(StateKey{x.id, up_to});
    for (auto s = last; s != first;) {
      --s;
      if (states_.at(s->second).retained_at) return s->first.second;
    }
  }
  return 0;
}

std::set<std::string> StateRegistry::files() const {
  std::set<std::string> out;
  for (const auto& [id, info] : states_) out.insert(info.file);
  return out;
}

}  // namespace hippo::master
