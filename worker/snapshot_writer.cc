#include "worker/snapshot_writer.h"

#include <filesystem>
#include <memory>
#include <vector>

#include "worker/engine/checkpoint.h"

namespace hippo::worker {

SnapshotWriter::SnapshotWriter(std::string checkpoint_dir, StateCache& cache,
                               std::function<void(const protocol::Snapshot&)> announce)
    : checkpoint_dir_(std::move(checkpoint_dir)), cache_(cache), announce_(std::move(announce)) {}

std::string SnapshotWriter::path_of(const std::string& file) const {
  return (std::filesystem::path(checkpoint_dir_) / file).string();
}

void SnapshotWriter::take(int64_t job, const TrainState& s, const protocol::SnapshotOrder& order,
                          uint64_t config_hash) {
  Pending p;
  p.message = {.job = job, .step = s.step, .state = order.state, .file = order.file, .bytes = 0};
  p.copy = s;
  if (!order.file.empty()) {
    p.path = path_of(order.file);
    auto bytes = std::make_shared<const std::vector<char>>(encode_checkpoint(s, config_hash));
    p.written = std::async(std::launch::async, [path = p.path, bytes] {
      Written w;
      w.content_hash = write_checkpoint_file(path, *bytes);
      // Already gone (a disk lost): the master finds out when it needs the file, and replays.
      std::error_code ec;
      auto size = std::filesystem::file_size(path, ec);
      w.bytes = ec ? int64_t{0} : static_cast<int64_t>(size);
      return w;
    });
  }
  pending_.push_back(std::move(p));
  announce(false);
}

void SnapshotWriter::announce(bool wait) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (p.written.valid()) {
      if (!wait && p.written.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
      try {
        Written w = p.written.get();
        p.message.bytes = w.bytes;
        p.message.checksum = std::move(w.content_hash);
      } catch (const CheckpointError& e) {
        pending_.pop_front();
        drop();
        throw StorageFailure(e.what(), "");
      }
    }
    cache_.put(p.message.state, p.copy);  // only a state the master will know of
    announce_(p.message);
    pending_.pop_front();
  }
}

void SnapshotWriter::settle() {
  try {
    announce(true);
  } catch (const StorageFailure&) {
    // announce dropped the rest; the job's own failure is what gets reported
  }
}

void SnapshotWriter::drop() {
  for (Pending& p : pending_) {
    if (!p.written.valid()) continue;
    try {
      p.written.get();
    } catch (const CheckpointError&) {
      continue;  // nothing was left behind
    }
    std::error_code ec;  // best effort: nothing refers to the file
    std::filesystem::remove(p.path, ec);
  }
  pending_.clear();
}

}  // namespace hippo::worker
