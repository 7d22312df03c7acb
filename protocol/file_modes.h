// Who may read what hippo writes: its plan (and the plan's WAL and shared memory), checkpoint
// directories, checkpoint files and a storage's identity hold every study's specs, metrics and
// model weights, so they are private to their owner by default, whatever the umask (which can
// only narrow these modes): files 0600, directories 0700.
//
// An operator shares them deliberately by giving the directory that holds them to a group with
// the setgid bit (`chgrp TEAM DIR && chmod 2770 DIR`): in such a directory, files are 0640 and
// new directories 0750 (Linux gives them the group and the setgid bit), so that the group's
// members read, and never write, what hippo writes there.
//
// Header-only: the plan (storage/), the engine's checkpoint writer (worker/engine/) and the
// protocol library all use it, and none of them links another.
#pragma once

#include <sys/stat.h>

#include <string>

namespace hippo::protocol {

inline constexpr mode_t kPrivateFileMode = 0600;
inline constexpr mode_t kGroupFileMode = 0640;  // in a setgid directory
inline constexpr mode_t kPrivateDirectoryMode = 0700;
inline constexpr mode_t kGroupDirectoryMode = 0750;  // in a setgid directory

// Whether a directory is shared with its group on purpose: its setgid bit.
inline bool shared_with_group(const struct stat& dir) {
  return S_ISDIR(dir.st_mode) && (dir.st_mode & S_ISGID) != 0;
}

// The mode of a new file in the directory open as `dir_fd` (private when it cannot be read).
inline mode_t file_mode_in(int dir_fd) {
  struct stat st {};
  return ::fstat(dir_fd, &st) == 0 && shared_with_group(st) ? kGroupFileMode : kPrivateFileMode;
}

// The same for the directory at `dir`.
inline mode_t file_mode_in(const std::string& dir) {
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && shared_with_group(st) ? kGroupFileMode : kPrivateFileMode;
}

// The mode of a new directory in `parent`.
inline mode_t directory_mode_in(const std::string& parent) {
  return file_mode_in(parent) == kGroupFileMode ? kGroupDirectoryMode : kPrivateDirectoryMode;
}

}  // namespace hippo::protocol
