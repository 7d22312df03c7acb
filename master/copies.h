// The copies of states' files on storages (storages.h), and how they move and go:
//
//   - a job whose parent is on another storage fetches it through the master, chunk by chunk
//     (serve: read from the master's own directory, or asked of a connected worker whose storage
//     holds it, whose answer is relayed; a copy that cannot be read is lost and the next one
//     tried; with none left, the state goes and is replayed);
//   - a copy reported missing or corrupt goes alone (lose), the last one with its state;
//   - files that no state needs are deleted on the storages that hold them, through a worker of
//     each (deletions, and the files a worker lists in its hello);
//   - a draining worker hands over the states whose only copy is on its own storage: the master
//     reads each file from it and keeps it in its own directory before the worker may exit
//     (handover), so that a drain loses no work; a file whose bytes are not the state's content
//     hash (StateInfo::checksum) is a lost copy, never kept.
//
// Decisions return Edits (edit.h); the master applies them and sends what they say. The only
// state kept here is that of the fetches and handovers under way (and the jobs' fetch source).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "master/edit.h"
#include "master/state_registry.h"
#include "master/storages.h"
#include "master/worker_pool.h"
#include "protocol/message.h"

namespace hippo::master {

class Copies {
 public:
  Copies(const StateRegistry& states, Storages& storages, WorkerPool& pool);

  // The storage of a worker's checkpoint directory.
  std::string storage_of(const ConnectedWorker& w) const {
    return storages_.of_worker(w.hello.storage);
  }

  // The copy of a state's file on `storage` is lost (missing, corrupt, unreadable): that copy
  // goes; the state goes when it was the last (a replay rebuilds it).
  Edit lose(int64_t state, const std::string& storage, const std::string& why) const;
  // The state goes with every copy (a fetched copy was bad at its source).
  Edit forget(int64_t state, const std::string& why) const;

  // Sends the job's worker the chunk of its parent at `offset`: read here when the master's own
  // directory holds it, else asked of a connected worker of a storage that holds it (the job's
  // fetch_source). `lost` (storage, why) is a copy found bad just now. With no copy left that
  // anyone can read, the state goes and the worker hears so.
  Edit serve(RunningJob& job, int64_t offset,
             std::optional<std::pair<std::string, std::string>> lost = std::nullopt) const;
  // A chunk a holder read for a job (or for a handover): relayed to the job's worker, or kept.
  Edit on_file_bytes(const ConnectedWorker& from, const protocol::FileBytes& m);
  // The job's worker kept its fetched parent on its own storage: one more copy.
  Edit on_fetched(const ConnectedWorker& w, const RunningJob& job,
                  const protocol::Fetched& m) const;
  // A holder was lost: the chunks it was asked for are asked of another one.
  Edit holder_lost(const std::string& peer);

  // The deletions that wait for a storage, to a connected worker of it (each storage's list is
  // taken once sent).
  Edit deletions();
  // At a worker's hello on another storage: the files of this plan's earlier masters (whose
  // incarnations are `incarnations`, this one's being `current`) that no state has there are
  // deleted, with the deletions that waited for it.
  Edit on_hello(const ConnectedWorker& w, const std::vector<std::string>& files,
                const std::set<std::string>& incarnations, const std::string& current);

  // A draining worker: the states whose only copy is on its storage (no other connected worker
  // shares that storage) are read from it, one chunk at a time, and kept here. False when it has
  // nothing (left) to hand over: it may exit.
  bool handing_over(const std::string& peer) const { return handovers_.count(peer) != 0; }
  Edit start_handover(const ConnectedWorker& w);
  // The draining worker is gone (lost, or said hello again): what it had not handed over stays
  // where it is, on its storage.
  void drop_handover(const std::string& peer);

 private:
  struct Handover {
    std::vector<int64_t> states;  // left to copy, the current one first
    int64_t read = 0;             // the id of the chunks asked for the current one
    std::string bytes;            // of the current one, so far
    int64_t total = 0;
  };
  // Asks the next chunk of the handover's current state (skipping states gone meanwhile).
  Edit next_chunk(const std::string& peer, Handover& h);
  Edit on_handover_bytes(const ConnectedWorker& from, const protocol::FileBytes& m, Handover& h);

  const StateRegistry& states_;
  Storages& storages_;
  WorkerPool& pool_;
  std::map<std::string, Handover> handovers_;  // by the draining worker's peer
  // Handover reads have ids of their own, far above job ids (a FileBytes names its read).
  int64_t next_read_ = int64_t{1} << 52;
};

}  // namespace hippo::master
