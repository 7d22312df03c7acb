// The training states the master knows of: where each lives (a checkpoint file, and the workers
// that hold it in memory are the worker pool's business), the metrics measured on them, and how
// they move when the tree splits. No I/O: the caller writes the plan rows and removes the files
// of what this forgets.
//
// States are named by (stage, step): the state after `step` steps of the trials through `stage`,
// start < step <= end (step 0 is a fresh model and needs no name). When a stage splits at d, the
// states above d move to the upper part, exactly as the search plan's checkpoints do. State ids
// are the master's, numbered from 1 per start of a master.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/message.h"
#include "protocol/trust.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

using StateKey = std::pair<StageId, int64_t>;  // (stage, step)

// The name of the state after `step` steps of `trial`'s path.
inline StateKey state_key(const StageTree& tree, TrialId trial, int64_t step) {
  return {tree.stage_at(trial, step), step};
}

// The tree split `split.stage` at `split.at`: moves the entries of `index` (a map by StateKey)
// above the split point to the upper stage, calling on_move(old key, value) for each. Every
// index of states by key follows a split this way.
template <typename Map, typename OnMove>
void move_above(Map& index, const Split& split, OnMove on_move) {
  auto first = index.upper_bound(StateKey{split.stage, split.at});
  auto last = index.lower_bound(StateKey{split.stage + 1, INT64_MIN});
  std::vector<std::pair<StateKey, typename Map::mapped_type>> moved(first, last);
  index.erase(first, last);
  for (auto& [key, value] : moved) {
    on_move(key, value);
    index[{split.upper, key.second}] = std::move(value);
  }
}

// Who produced a state or a metric (the plan's provenance, schema 14): the key of the worker
// that wrote or measured it, and the keys of every worker whose work it rests on (its own and
// its parent state's lineage), space-separated and sorted; "" when unknown (a row from before).
struct Provenance {
  std::string producer{}, lineage{};
  bool operator==(const Provenance&) const = default;
};
// The producer a peer's work is recorded under: its key, or "anonymous" (--insecure).
std::string producer_of(const protocol::PeerIdentity& peer);
// What a worker of `producer` makes from a state of `parent` (a fresh model: {}).
Provenance made_by(const std::string& producer, const Provenance& parent);

// The metrics measured on a state, and who measured them.
struct Measured {
  nlohmann::json metrics;
  Provenance provenance{};
};

struct StateInfo {
  StageId stage = kNoStage;
  int64_t step = 0;
  std::string file;  // "" for a state kept in a worker's memory only
  // The storages that hold its file (storages.h): the one it was written to, and those it was
  // fetched to since; empty when it has no file.
  std::set<std::string> storages{};
  int64_t checkpoint_row = -1;  // its row in the plan's checkpoints, if it has one
  int64_t bytes = 0;            // its file's
  // Its file's content hash, as its producer reported it (protocol/content_hash.h), recorded in
  // the plan (checkpoints.checksum) and named in every job that starts from it: its loader,
  // fetcher or copier compares. "" when unknown (a row written before content hashes, or a
  // worker that reports none): such a file is checked as before, field by field and by its CRC.
  std::string checksum{};
  // When no running study needed it any more and it was kept for later studies (retention.h);
  // unset while running studies have needed it ever since it was made.
  std::optional<double> retained_at{};
  // Whether a running study needed it at the last collection (a state newly made is needed).
  bool needed = true;
  // The environment it was computed in (worker_environment, running_job.h); "" when unknown.
  std::string environment{};
  Provenance provenance{};
};

// The largest checkpoint file a snapshot may say it wrote: 1 TiB, the whole training state (fp32
// parameters and Adam's two moments, 12 bytes a parameter) of a model of 90 billion parameters.
// A size from a worker is a claim; beyond this it is refused, whatever else the master knows.
inline constexpr int64_t kMaxCheckpointBytes = int64_t{1} << 40;
// The engine's checkpoints of one root key (one model, the same shapes) have exactly one size
// (worker/engine/checkpoint.h). An external trainer writes its own format, whose size may change
// from one state to the next (a growing buffer, compression): its sizes are not compared.

// Why a snapshot's reported size is not to be believed, "" when it may be: over
// kMaxCheckpointBytes or negative, unlike the file's size that the master `measured` itself (in
// its own directory), or, for the engine's files (not an `external` trainer's), unlike the size
// `expected` of the root key's other states.
std::string implausible_checkpoint_bytes(int64_t reported, std::optional<int64_t> measured,
                                         std::optional<int64_t> expected, bool external);

// A state the plan's checkpoint row names (kept for later studies if the row says so); a row that
// names no storage (written before storages) is in `own_storage`, the master's directory. A
// checksum that is not a content hash (only '' is expected from older rows) is unknown.
StateInfo state_of(const CheckpointRow& row, const std::string& own_storage);

class StateRegistry {
 public:
  explicit StateRegistry(std::string incarnation);

  // A new state id, and the order that makes a worker snapshot it after `step` steps (with a
  // file named by checkpoint_files.h).
  protocol::SnapshotOrder new_snapshot_order(int64_t step);
  // An id for a state made elsewhere (a worker's record of a job of an earlier master).
  int64_t new_state_id() { return next_state_++; }
  // A state made outside this master start (a checkpoint restored from the plan): a new id.
  int64_t add_restored(const StateInfo& info);
  // A state a worker reported under the id of its order.
  void add(int64_t id, const StateInfo& info);

  std::optional<int64_t> state_at(const StateKey& key) const;
  bool has(int64_t id) const { return states_.count(id) != 0; }
  const StateInfo& info(int64_t id) const { return states_.at(id); }
  // The nearest state before `step` on `trial`'s path: its id (-1: a fresh model) and its step.
  std::pair<int64_t, int64_t> nearest_before(const StageTree& tree, TrialId trial,
                                             int64_t step) const;

  // The metrics measured on a state, whichever trial asked for them.
  void cache_metrics(const StateKey& key, const Measured& measured);
  const Measured* cached_metrics(const StateKey& key) const;

  // The tree split `split.stage` at `split.at`: states and metrics above it move to the upper part.
  void on_split(const Split& split);
  // Forgets a state (its checkpoint is lost); returns what it was.
  StateInfo forget(int64_t id);
  // Every state, by id, and the bytes of their files.
  const std::map<int64_t, StateInfo>& all() const { return states_; }
  int64_t bytes() const { return bytes_; }
  // How many states with a checkpoint no running study needs (kept for later studies).
  int64_t kept() const { return kept_; }
  // The storages that hold a state's file now.
  void set_storages(int64_t id, std::set<std::string> storages);
  // Marks a state needed (or not) by a running study, and kept for later studies since a time.
  void set_needed(int64_t id, bool needed, std::optional<double> retained_at);
  // The step of the deepest state on `trial`'s path, at most `up_to`, that an earlier study left
  // behind (retained_at set); 0 if there is none.
  int64_t deepest_retained(const StageTree& tree, TrialId trial, int64_t up_to) const;
  // Every file of a known state.
  std::set<std::string> files() const;

  const std::string& incarnation() const { return incarnation_; }

 private:
  std::string incarnation_;
  int64_t next_state_ = 1;
  std::map<int64_t, StateInfo> states_;   // by id
  int64_t bytes_ = 0;                     // the sum of their bytes
  int64_t kept_ = 0;                      // kept(): counted as states come and go
  std::map<StateKey, int64_t> index_;     // key -> id
  std::map<StateKey, Measured> metrics_;  // key -> {"accuracy": .., "loss": ..}, and by whom
};

}  // namespace hippo::master
