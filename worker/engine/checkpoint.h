// Checkpoint files: one TrainState in one file.
//
// Layout (little-endian, as the machine writes it):
//   header   magic "HIPPOCKP" (8 bytes), version u32, optimizer u32 (0 none, 1 sgd, 2 adam,
//            3 adamw), step i64, data_position i64, rng_counter u64, config_hash u64,
//            param_count u64, opt_state_count u64                              (64 bytes)
//   body     params f32[param_count], opt_state f32[opt_state_count]
//   trailer  CRC-32 (zlib) of header and body, u32
// Saving writes a temporary file next to the target, fsyncs it, renames it over the target and
// fsyncs the directory, so a reader sees the old file or the new one, never a torn one.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/train_state.h"

namespace hippo::worker {

// A checkpoint that cannot be written, or read back as exactly what was saved for this config.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The header and body of the checkpoint file of `state`: its buffers copied to host memory (for a
// GPU state, through pinned staging). This is the part of saving that must happen before training
// goes on; the write can then run in the background.
std::vector<char> encode_checkpoint(const TrainState& state, uint64_t config_hash);
// Writes encode_checkpoint's bytes and their checksum at `path` durably (temp file, fsync,
// rename, fsync of the directory). On failure (e.g. a full disk) throws CheckpointError and
// leaves nothing behind.
void write_checkpoint_file(const std::string& path, const std::vector<char>& bytes);
// Both, one after the other.
void save_checkpoint(const std::string& path, const TrainState& state, uint64_t config_hash);
// Refuses (CheckpointError naming the file and the problem) a missing file, a wrong magic or
// version, a truncated or extended file, a checksum mismatch and a config hash other than
// expected_config_hash. The state's buffers are placed in `backend`'s memory.
TrainState load_checkpoint(const std::string& path, uint64_t expected_config_hash,
                           const std::shared_ptr<const kernels::Backend>& backend);
// The same from the bytes of a checkpoint file, `name` naming it in errors (load_checkpoint reads
// the file and calls this; fuzz/ feeds it arbitrary bytes).
TrainState read_checkpoint(std::string_view bytes, const std::string& name,
                           uint64_t expected_config_hash,
                           const std::shared_ptr<const kernels::Backend>& backend);

}  // namespace hippo::worker
