// Checkpoint files: one TrainState in one file.
//
// Layout (little-endian, as the machine writes it):
//   header   magic "HIPPOCKP" (8 bytes), version u32, optimizer u32 (0 none, 1 sgd, 2 adam,
//            3 adamw), step i64, data_position i64, rng_counter u64, config_hash u64,
//            param_count u64, opt_state_count u64                              (64 bytes)
//   body     params f32[param_count], opt_state f32[opt_state_count]
//   trailer  CRC-32 (zlib) of header and body, u32
//
// A checkpoint directory may be writable by others (a group, an NFS export), so a file is never
// trusted for being there. Saving creates a temporary file with an unpredictable name beside the
// target ("<name>.tmp.<16 hex digits>"), through a descriptor of the directory, with
// O_CREAT|O_EXCL|O_NOFOLLOW (a symlink or file planted there is never followed nor truncated),
// fsyncs it, renames it to the target without ever replacing an existing file
// (renameat2(RENAME_NOREPLACE), or link + unlink on a file system without it) and fsyncs the
// directory: a reader sees the whole file or none, and a file that exists is never overwritten.
// Loading opens without following a symlink and without blocking (O_NOFOLLOW|O_NONBLOCK), refuses
// anything but a regular file of exactly the size the expected state has (before reading a byte:
// a FIFO, /dev/zero or a huge file cost nothing), then checks every field of the header against
// what the run must hold at that step (CheckpointShape): a valid checksum is not enough.
//
// Content hashes (protocol/content_hash.h): the writer hashes the file's bytes as it writes them
// and returns the hash, which the worker reports with the snapshot and the master records; a
// loader given the recorded hash compares it with the bytes it read before it decodes them. The
// CRC-32 finds accidents; the hash finds a file that is not the one its producer wrote (zeroed
// parameters with a recomputed CRC).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/train_state.h"

namespace hippo::worker {

// A checkpoint that cannot be written, or read back as exactly the state the run needs.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the checkpoint of a run after `step` steps must hold, field by field (the engine knows it:
// Engine::checkpoint_shape, from the run's config and the batch sizes of the steps before).
struct CheckpointShape {
  uint64_t config_hash = 0;
  int64_t step = 0;
  int64_t data_position = 0;
  uint64_t rng_counter = 0;
  std::string optimizer;  // "" at step 0 (no optimizer state yet), else sgd, adam or adamw
  int64_t param_count = 0;
  int64_t opt_state_count = 0;

  // The exact size of such a file in bytes; -1 if the counts are negative or too large for one.
  int64_t file_bytes() const;
};

// The header and body of the checkpoint file of `state`: its buffers copied to host memory (for a
// GPU state, through pinned staging). This is the part of saving that must happen before training
// goes on; the write can then run in the background.
std::vector<char> encode_checkpoint(const TrainState& state, uint64_t config_hash);
// Writes encode_checkpoint's bytes and their checksum at `path` durably (above), and returns the
// file's content hash. Throws CheckpointError, leaving nothing behind, when it cannot: `path`
// exists (whatever it is), the directory is missing, the disk is full.
std::string write_checkpoint_file(const std::string& path, const std::vector<char>& bytes);
// Writes the bytes of a whole checkpoint file (checksum included: one fetched from another
// storage) at `path` the same way, with the same errors.
void write_checkpoint_bytes(const std::string& path, std::string_view bytes);
// Both, one after the other; the file's content hash.
std::string save_checkpoint(const std::string& path, const TrainState& state, uint64_t config_hash);
// Refuses (CheckpointError naming the file and the problem) a missing file, a symlink, anything
// but a regular file, a size other than expected.file_bytes(), a wrong magic or version, a
// checksum mismatch, and any field other than `expected` says (config hash, step, data position,
// RNG counter, optimizer, sizes), and, when `content_hash` is not "" (unknown), bytes of another
// content hash (check_content_hash). The state's buffers are placed in `backend`'s memory.
TrainState load_checkpoint(const std::string& path, const CheckpointShape& expected,
                           const std::shared_ptr<const kernels::Backend>& backend,
                           const std::string& content_hash = "");
// The same from the bytes of a checkpoint file, `name` naming it in errors (load_checkpoint reads
// the file and calls this; fuzz/ feeds it arbitrary bytes).
TrainState read_checkpoint(std::string_view bytes, const std::string& name,
                           const CheckpointShape& expected,
                           const std::shared_ptr<const kernels::Backend>& backend);

// Throws CheckpointError naming `name` when `content_hash` is not "" and the bytes have another
// one: they are not the state their producer wrote.
void check_content_hash(std::string_view bytes, const std::string& content_hash,
                        const std::string& name);
// The content hash of the regular file at `path` (opened as load_checkpoint opens it, read in
// pieces of 1 MiB); CheckpointError when it cannot be read. (An external trainer's files are
// checked through one descriptor each: worker/trainer_files.h.)
std::string file_content_hash(const std::string& path);
// check_content_hash for the file at `path` (a regular file, else CheckpointError; any content
// when `content_hash` is "").
void check_file_content_hash(const std::string& path, const std::string& content_hash);

// The size of the regular file at `path`, opened as load_checkpoint opens it (no symlink, no
// blocking on a FIFO); CheckpointError for anything else.
int64_t checked_file_size(const std::string& path);

}  // namespace hippo::worker
