// Snapshots of the running job. Training waits only for the state's copy to host memory
// (encode_checkpoint); the file is written, checksummed, hashed (its content hash, reported with
// the snapshot: protocol/content_hash.h) and fsynced in the background. A snapshot
// is announced to the master (its Snapshot message) only once its file is durable, and snapshots
// are announced in the order they were taken. Announcing one also puts it in the state cache:
// the worker holds only states the master knows of.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>

#include "protocol/message.h"
#include "worker/engine/train_state.h"
#include "worker/state_cache.h"

namespace hippo::worker {

// A job that failed because of the disk, not the stage: a checkpoint that could not be written
// (the master retries the stage) or a parent checkpoint that could not be read (lost_file: the
// master forgets it and rebuilds the state by replay).
struct StorageFailure : std::runtime_error {
  StorageFailure(const std::string& what, std::string lost)
      : std::runtime_error(what), lost_file(std::move(lost)) {}
  std::string lost_file;
};

class SnapshotWriter {
 public:
  // announce sends a Snapshot message; checkpoint_dir is where files go.
  SnapshotWriter(std::string checkpoint_dir, StateCache& cache,
                 std::function<void(const protocol::Snapshot&)> announce);

  // Takes the snapshot `order` of job `job` at state s (s.step == order.step).
  void take(int64_t job, const TrainState& s, const protocol::SnapshotOrder& order,
            uint64_t config_hash);
  // Announces the snapshots whose files are written, in order (wait: all of them, waiting for
  // their writes). A failed write (e.g. a full disk, or a name at which something exists already,
  // which is never replaced: nothing is left behind) throws StorageFailure; the snapshots after
  // it are dropped unannounced and their files removed.
  void announce(bool wait);
  // After a job failed: announces the snapshots taken before the failure whose files could be
  // written (they are good states), and drops the others.
  void settle();
  // A snapshot whose file another process wrote and made durable (an external trainer): announced
  // at once, not cached (the worker does not hold that state).
  void announce_written(const protocol::Snapshot& snapshot) { announce_(snapshot); }
  // Forgets the snapshots not yet announced (an abandoned job) once their writes are over,
  // removing their files: nobody will be told of them.
  void drop();

  std::string path_of(const std::string& file) const;

 private:
  struct Written {
    int64_t bytes = 0;
    std::string content_hash;
  };
  struct Pending {
    protocol::Snapshot message;
    TrainState copy;               // for the cache, once announced
    std::string path;              // empty: a state kept in memory only
    std::future<Written> written;  // valid while a file is being written
  };

  std::string checkpoint_dir_;
  StateCache& cache_;
  std::function<void(const protocol::Snapshot&)> announce_;
  std::deque<Pending> pending_;  // the running job's, oldest first
};

}  // namespace hippo::worker
