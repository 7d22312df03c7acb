#include "worker/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "protocol/checkpoint_storage.h"
#include "protocol/content_hash.h"
#include "protocol/log.h"
#include "worker/engine/checkpoint.h"
#include "worker/snapshot_writer.h"

namespace hippo::worker {

CheckpointStore::CheckpointStore(std::string dir)
    : dir_(std::move(dir)), identity_(protocol::storage_identity(dir_)) {}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (out.size() == protocol::kMaxListedFiles) break;  // the rest at a later hello
    std::string name = entry.path().filename().string();
    if (protocol::incarnation_of(name)) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

protocol::FileBytes CheckpointStore::read(const protocol::ReadFile& order) const {
  return protocol::read_file_bytes(dir_, order);
}

void CheckpointStore::remove(const std::vector<std::string>& files) const {
  // unlink: a file or a symlink (never what it points to), never a directory.
  for (const std::string& file : files) ::unlink((dir_ + "/" + file).c_str());
}

bool CheckpointStore::keep(const std::string& file, std::string_view bytes) const {
  const std::string path = dir_ + "/" + file;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {  // fetched by a neighbour?
    try {
      check_file_content_hash(path, protocol::content_hash(bytes));
      return true;
    } catch (const CheckpointError& e) {
      spdlog::warn("storage {} ({}): not keeping the fetched {}: {}", identity_, dir_, file,
                   e.what());
      return false;
    }
  }
  try {
    write_checkpoint_bytes(path, bytes);
  } catch (const CheckpointError& e) {
    throw StorageFailure(std::string("keeping a fetched checkpoint: ") + e.what(), "");
  }
  return true;
}

std::string CheckpointStore::probe() const {
  const std::string path = dir_ + "/.hippo-probe-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write in " + dir_ + ": " + std::strerror(errno);
  const std::string block(1 << 20, '\0');
  std::string why;
  for (size_t done = 0; done < block.size() && why.empty();) {
    const ssize_t n = ::write(fd, block.data() + done, block.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      why = "cannot write in " + dir_ + ": " + std::strerror(n < 0 ? errno : ENOSPC);
    else
      done += static_cast<size_t>(n);
  }
  if (why.empty() && ::fsync(fd) != 0)
    why = "cannot sync a write in " + dir_ + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(path.c_str());
  return why;
}

}  // namespace hippo::worker
