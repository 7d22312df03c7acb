#include "worker/trainer_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "protocol/content_hash.h"

namespace hippo::worker {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw TrainerFileError("checkpoint " + path + ": " + why);
}

// A descriptor closed with its scope unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string error_text(int err) {
  return std::strerror(err);
}

// `path` opened for reading without following a symlink or waiting on a FIFO; its stat.
int open_regular(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) fail(path, "is a symbolic link (a checkpoint must be a regular file)");
    if (err == ENOENT) fail(path, "cannot open: missing");
    fail(path, "cannot open: " + error_text(err));
  }
  Fd owned(fd);
  if (::fstat(fd, &st) != 0) fail(path, "cannot stat: " + error_text(errno));
  if (!S_ISREG(st.st_mode))
    fail(path, S_ISFIFO(st.st_mode) ? "is a FIFO, not a regular file" : "is not a regular file");
  return owned.release();
}

// Reads the descriptor from its start to its end in pieces, giving each to `piece`.
template <typename F>
void read_all(int fd, const std::string& path, F&& piece) {
  std::vector<char> buffer(size_t{1} << 20);
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: " + error_text(errno));
    if (n == 0) return;
    piece(std::string_view(buffer.data(), static_cast<size_t>(n)));
    at += n;
  }
}

void compare(const std::string& path, const std::string& got, const std::string& want) {
  if (!want.empty() && got != want)
    fail(path, "content hash " + got + ", its producer wrote " + want +
                   " (not the state it wrote: replaced or corrupted)");
}

}  // namespace

VerifiedInput::VerifiedInput(const std::string& path, const std::string& content_hash, bool copy) {
  struct stat st {};
  Fd file(open_regular(path, st));
  // Only this user (and root) can change the bytes of a file it owns that has no write bit for
  // group or others (an ACL granting write shows in the group bits, its mask).
  copied_ = copy || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  protocol::ContentHash hash;
  if (!copied_) {
    read_all(file.get(), path, [&](std::string_view bytes) { hash.update(bytes); });
    compare(path, hash.hex(), content_hash);
    fd_ = file.release();
  } else {
    Fd memory(::memfd_create("hippo-parent-checkpoint", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (memory.get() < 0)
      fail(path, "cannot make a private copy: memfd_create: " + error_text(errno));
    read_all(file.get(), path, [&](std::string_view bytes) {
      hash.update(bytes);  // exactly the bytes the copy gets
      for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(memory.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(path, "cannot make a private copy: " + error_text(errno));
        done += static_cast<size_t>(n);
      }
    });
    compare(path, hash.hex(), content_hash);
    if (::fcntl(memory.get(), F_ADD_SEALS,
                F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
      fail(path, "cannot seal its private copy: " + error_text(errno));
    fd_ = memory.release();
  }
  view_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_);
}

VerifiedInput::~VerifiedInput() {
  if (fd_ >= 0) ::close(fd_);
}

WrittenFile written_file(const std::string& path) {
  struct stat st {};
  Fd fd(open_regular(path, st));
  // Durable before the master hears of it: a trainer that only renamed its file, or whose write
  // is still in the page cache, fails here, not at the next load.
  if (::fsync(fd.get()) != 0) fail(path, "fsync failed: " + error_text(errno));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  Fd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) fail(path, "cannot open its directory: " + error_text(errno));
  // Some file systems cannot fsync a directory (EINVAL): their renames are as durable as they get.
  if (::fsync(dfd.get()) != 0 && errno != EINVAL)
    fail(path, "fsync of its directory failed: " + error_text(errno));
  WrittenFile out;
  protocol::ContentHash hash;
  read_all(fd.get(), path, [&](std::string_view bytes) {
    hash.update(bytes);
    out.bytes += static_cast<int64_t>(bytes.size());
  });
  out.content_hash = hash.hex();
  return out;
}

}  // namespace hippo::worker
