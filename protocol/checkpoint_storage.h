// Checkpoint files across storages, as master and workers both see them: the one naming rule of
// the files (as LevelDB's filename.h), the identity of the storage that holds them, and reading a
// chunk of one for a worker on another storage.
//
// The master names every file a worker writes, "state-<incarnation>-<state id>.ckpt"; a worker
// writes it through a temporary file "<that name>.tmp.<16 hex digits>" (worker/engine/
// checkpoint.h). The incarnation (16 hex digits) is random per start of a master and recorded in
// the plan, so names of one start never meet another's, and a master knows which files are its
// plan's (master/checkpoint_files.h removes those that no row names, and nothing else).
//
// A storage is what one checkpoint directory reaches: processes that share a directory (one host,
// an NFS export) share its files; a worker on another host's local disk has files of its own.
// Its identity is a random id kept in the directory itself (".hippo-storage"), made by the first
// process that uses it, so that every process that opens the same directory reads the same id.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/message.h"

namespace hippo::protocol {

std::string checkpoint_file_name(const std::string& incarnation, int64_t state);
// The incarnation in a checkpoint file's name or in a temporary file's name for one; nullopt for
// any other name.
std::optional<std::string> incarnation_of(const std::string& file);
// A checkpoint file's name (not a temporary one's).
bool is_checkpoint_file_name(const std::string& file);

// Makes the checkpoint directory `dir` when it is not there (its parents as `mkdir -p` does):
// private to this user, or readable by the group of a setgid parent (protocol/file_modes.h). A
// directory that is there keeps the mode its operator gave it. Throws std::runtime_error naming the
// problem.
void make_checkpoint_directory(const std::string& dir);

// The identity of the storage that `dir` is on: read from dir/.hippo-storage, which is made (with
// a new random id, private unless `dir` is shared (protocol/file_modes.h), never replacing a file
// that another process made first) when it is not there. Throws std::runtime_error naming the file
// when it cannot be made or read, or is not an id.
std::string storage_identity(const std::string& dir);
// 32 lowercase hex digits.
bool is_valid_storage_identity(std::string_view id);

// The bytes of dir/order.file that `order` asks for (at most order.length, fewer at the file's
// end), or why they cannot be read: a missing file, a symlink, anything but a regular file (never
// followed, a FIFO never blocks), an offset at or past its end.
FileBytes read_file_bytes(const std::string& dir, const ReadFile& order);

}  // namespace hippo::protocol
