// The worker's checkpoint directory as the rest of the cluster sees it: one storage
// (protocol/checkpoint_storage.h) whose identity the worker tells its master, whose checkpoint
// files it lists at each hello, reads in chunks for workers on other storages (ReadFile), keeps the
// files fetched from other storages in, and deletes from when the master says that no state needs
// them (DeleteFiles). Snapshots are written by snapshot_writer.h; this never writes a state of its
// own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "protocol/message.h"

namespace hippo::worker {

class CheckpointStore {
 public:
  // Reads (or makes) the directory's storage identity; std::runtime_error naming the problem.
  explicit CheckpointStore(std::string dir);

  const std::string& identity() const { return identity_; }
  // The names in the directory that are checkpoint files or their temporary files, at most
  // protocol::kMaxListedFiles of them.
  std::vector<std::string> list() const;
  // The bytes `order` asks for, or why they cannot be read (protocol::read_file_bytes).
  protocol::FileBytes read(const protocol::ReadFile& order) const;
  // Removes these files (a file already gone is fine; never a directory, never a link's target).
  void remove(const std::vector<std::string>& files) const;
  // Keeps the bytes of a whole checkpoint file, fetched from another storage (and checked), as
  // `file` (durably, as a snapshot's). A file of that name that is there already (another worker
  // on this storage fetched it first) is kept if it has the same content hash; else (planted, or
  // corrupted since) it is never replaced, and false says this storage holds no good copy.
  // StorageFailure when it cannot be written.
  bool keep(const std::string& file, std::string_view bytes) const;
  // Whether the directory takes a write now: a probe file of 1 MiB written, synced and removed.
  // "" when it does, else why not (a full disk, a read-only one).
  std::string probe() const;

 private:
  std::string dir_;
  std::string identity_;
};

}  // namespace hippo::worker
