#include "protocol/checkpoint_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "protocol/file_modes.h"
#include "protocol/random_token.h"

namespace hippo::protocol {
namespace {

constexpr size_t kIncarnationDigits = 16;  // also the temporary files' random suffix
constexpr size_t kStorageDigits = 32;
constexpr const char* kStorageFile = ".hippo-storage";

bool all_of_class(std::string_view text, int (*in_class)(int)) {
  if (text.empty()) return false;
  for (unsigned char c : text)
    if (!in_class(c)) return false;
  return true;
}

int is_lower_hex(int c) {
  return std::isdigit(c) || (c >= 'a' && c <= 'f');
}

// The id in an existing identity file; a symlink, a FIFO or a file of another size is refused.
std::string read_identity(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  struct stat st {};
  char text[kStorageDigits + 1] = {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const ssize_t n =
      regular && st.st_size == kStorageDigits + 1 ? ::read(fd, text, sizeof text) : -1;
  ::close(fd);
  const std::string id(text, kStorageDigits);
  if (n != static_cast<ssize_t>(sizeof text) || text[kStorageDigits] != '\n' ||
      !is_valid_storage_identity(id))
    throw std::runtime_error(path + " is not a storage identity (32 hex digits and a newline)");
  return id;
}

}  // namespace

std::string checkpoint_file_name(const std::string& incarnation, int64_t state) {
  return "state-" + incarnation + "-" + std::to_string(state) + ".ckpt";
}

std::optional<std::string> incarnation_of(const std::string& file) {
  // state-<16 hex>-<digits>.ckpt, optionally followed by .tmp.<16 hex>
  const std::string prefix = "state-", extension = ".ckpt", temporary = ".tmp.";
  if (file.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string incarnation = file.substr(prefix.size(), kIncarnationDigits);
  if (incarnation.size() != kIncarnationDigits || !all_of_class(incarnation, is_lower_hex))
    return std::nullopt;
  size_t at = prefix.size() + kIncarnationDigits;
  if (file.compare(at, 1, "-") != 0) return std::nullopt;
  const size_t end = file.find(extension, ++at);
  if (end == std::string::npos || !all_of_class(file.substr(at, end - at), ::isdigit))
    return std::nullopt;
  const std::string rest = file.substr(end + extension.size());
  if (rest.empty()) return incarnation;
  if (rest.rfind(temporary, 0) == 0 && rest.size() == temporary.size() + kIncarnationDigits &&
      all_of_class(rest.substr(temporary.size()), is_lower_hex))
    return incarnation;
  return std::nullopt;
}

bool is_checkpoint_file_name(const std::string& file) {
  return incarnation_of(file) && file.size() > 5 && file.compare(file.size() - 5, 5, ".ckpt") == 0;
}

bool is_valid_storage_identity(std::string_view id) {
  return id.size() == kStorageDigits && all_of_class(id, is_lower_hex);
}

void make_checkpoint_directory(const std::string& dir) {
  std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // "dir/"
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw std::runtime_error(parent.string() + ": " + ec.message());
  if (::mkdir(path.c_str(), directory_mode_in(parent.string())) != 0 && errno != EEXIST)
    throw std::runtime_error(dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(dir + " is not a directory");
}

std::string storage_identity(const std::string& dir) {
  const std::string path = dir + "/" + kStorageFile;
  if (::access(path.c_str(), F_OK) == 0) return read_identity(path);
  // A new id in a temporary file, linked to the name: link never replaces, so when two processes
  // make one at once, both read the one that was linked first.
  const std::string temporary = path + ".tmp." + random_hex(kIncarnationDigits);
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  file_mode_in(dir));
  if (fd < 0) throw std::runtime_error(temporary + ": " + std::strerror(errno));
  const std::string text = random_hex(kStorageDigits) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  const int linked = written ? ::link(temporary.c_str(), path.c_str()) : -1;
  const int error = errno;
  ::unlink(temporary.c_str());
  if (!written || (linked != 0 && error != EEXIST))
    throw std::runtime_error(path + ": " + std::strerror(error));
  return read_identity(path);
}

FileBytes read_file_bytes(const std::string& dir, const ReadFile& order) {
  FileBytes out;
  out.read = order.read;
  out.offset = order.offset;
  const std::string path = dir + "/" + order.file;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.error = path + ": " + std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    out.error = path + " is not a regular file";
  } else if (order.offset >= st.st_size) {
    out.error = path + " has " + std::to_string(st.st_size) + " bytes, none at offset " +
                std::to_string(order.offset);
  } else {
    out.total = st.st_size;
    out.data.resize(
        static_cast<size_t>(std::min<int64_t>(order.length, st.st_size - order.offset)));
    const ssize_t n = ::pread(fd, out.data.data(), out.data.size(), order.offset);
    if (n != static_cast<ssize_t>(out.data.size())) {
      out.data.clear();
      out.error = path + ": " + (n < 0 ? std::strerror(errno) : "shorter than it was");
    }
  }
  ::close(fd);
  return out;
}

}  // namespace hippo::protocol
