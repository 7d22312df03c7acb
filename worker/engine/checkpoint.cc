#include "worker/engine/checkpoint.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "protocol/content_hash.h"
#include "protocol/file_modes.h"
#include "protocol/random_token.h"

namespace hippo::worker {
namespace {

constexpr char kMagic[8] = {'H', 'I', 'P', 'P', 'O', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 64, kTrailerSize = 4;
constexpr std::array<const char*, 4> kOptimizers = {"", "sgd", "adam", "adamw"};

template <typename T>
void put(std::vector<char>& out, const T& v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

template <typename T>
T get(std::string_view in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

uint32_t crc(const char* data, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint " + path + ": " + what);
}

std::string error_text(int err) {
  return std::strerror(err);
}

// A file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// 16 hex digits from the kernel's random source: a temporary name at which nobody can have
// planted anything in advance.
std::string random_suffix(const std::string& path) {
  try {
    return protocol::random_hex(16);
  } catch (const std::system_error& e) {
    fail(path, e.what());
  }
}

// The directory of `path`, opened, and the last component of `path`.
std::pair<Fd, std::string> open_parent(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") fail(path, "not a file name");
  const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) fail(path, "cannot open its directory " + dir + ": " + error_text(errno));
  return {std::move(dfd), name};
}

// Renames dir/from to dir/to unless dir/to exists (whatever it is: a file, a symlink, a FIFO).
// Returns 0 or an errno (EEXIST when it exists).
int rename_without_replacing(int dfd, const std::string& from, const std::string& to) {
  if (::renameat2(dfd, from.c_str(), dfd, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return errno;
  // A file system without RENAME_NOREPLACE (NFS, older kernels): a hard link fails with EEXIST
  // just as atomically; then the temporary name goes.
  if (::linkat(dfd, from.c_str(), dfd, to.c_str(), 0) != 0) return errno;
  ::unlinkat(dfd, from.c_str(), 0);
  return 0;
}

// Opens an existing file to read it as a checkpoint: never through a symlink, never blocking (a
// FIFO opens at once with O_NONBLOCK, and is then refused), a regular file only. Its size.
std::pair<Fd, int64_t> open_regular(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ELOOP) fail(path, "is a symbolic link (a checkpoint must be a regular file)");
    if (err == ENOENT) fail(path, "cannot open: missing");
    fail(path, "cannot open: " + error_text(err));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat: " + error_text(errno));
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)                         ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISDIR(st.st_mode)                        ? "a directory"
                                                                    : "a special file";
    fail(path, std::string("is ") + kind + ", not a regular file");
  }
  return {std::move(fd), static_cast<int64_t>(st.st_size)};
}

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t done = ::write(fd, data, n);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) fail(path, std::string("write failed: ") + error_text(errno));
    data += done;
    n -= static_cast<size_t>(done);
  }
}

void fsync_directory(int dfd, const std::string& path) {
  // Some file systems cannot fsync a directory (EINVAL): their renames are as durable as they get.
  if (::fsync(dfd) != 0 && errno != EINVAL)
    fail(path, "fsync of its directory failed: " + error_text(errno));
}

// Writes `parts` one after the other at `path`: a temporary file of an unpredictable name, fsync,
// a rename that never replaces, and a directory fsync (checkpoint.h). With `hash`, each part goes
// through it as it is written.
void write_durably(const std::string& path, std::initializer_list<std::string_view> parts,
                   protocol::ContentHash* hash = nullptr) {
  auto [dir, name] = open_parent(path);
  // Refused here already (clearer than after the write); the rename below is what guarantees it.
  struct stat st;
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
    fail(path, "exists already (a checkpoint file is never overwritten)");
  const std::string tmp = name + ".tmp." + random_suffix(path);
  {
    Fd fd(::openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   protocol::file_mode_in(dir.get())));
    if (fd.get() < 0) fail(path, "cannot create " + tmp + ": " + error_text(errno));
    try {
      for (std::string_view part : parts) {
        if (hash) hash->update(part);
        write_all(fd.get(), part.data(), part.size(), path);
      }
      if (::fsync(fd.get()) != 0) fail(path, "fsync failed: " + error_text(errno));
    } catch (...) {
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      throw;
    }
  }
  if (const int err = rename_without_replacing(dir.get(), tmp, name); err != 0) {
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    fail(path, err == EEXIST ? "exists already (a checkpoint file is never overwritten)"
                             : "cannot rename " + tmp + ": " + error_text(err));
  }
  try {
    fsync_directory(dir.get(), path);  // the rename itself is durable
  } catch (...) {
    ::unlinkat(dir.get(), name.c_str(), 0);  // not durable: nothing is left behind
    throw;
  }
}

}  // namespace

int64_t CheckpointShape::file_bytes() const {
  constexpr int64_t kFixed = kHeaderSize + kTrailerSize;
  constexpr int64_t kMost = (std::numeric_limits<int64_t>::max() - kFixed) / 4;
  if (param_count < 0 || opt_state_count < 0 || param_count > kMost ||
      opt_state_count > kMost - param_count)
    return -1;
  return kFixed + 4 * (param_count + opt_state_count);
}

std::vector<char> encode_checkpoint(const TrainState& s, uint64_t config_hash) {
  uint32_t optimizer = 0;
  while (optimizer < kOptimizers.size() && s.optimizer != kOptimizers[optimizer]) ++optimizer;
  if (optimizer == kOptimizers.size())
    throw CheckpointError("cannot save a state of the unknown optimizer \"" + s.optimizer + "\"");

  std::vector<char> out(kMagic, kMagic + sizeof kMagic);
  out.reserve(kHeaderSize + static_cast<size_t>(s.params.bytes() + s.opt_state.bytes()) +
              kTrailerSize);
  put(out, kVersion);
  put(out, optimizer);
  put(out, s.step);
  put(out, s.data_position);
  put(out, s.rng_counter);
  put(out, config_hash);
  put(out, uint64_t(s.params.size()));
  put(out, uint64_t(s.opt_state.size()));
  for (const kernels::Buffer<float>* v : {&s.params, &s.opt_state}) {
    if (v->empty()) continue;
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(v->bytes()));
    v->backend()->copy_to_host(out.data() + at, v->data(), v->bytes());
  }
  return out;  // the checksum is the writer's: it costs as much as the copy
}

std::string save_checkpoint(const std::string& path, const TrainState& s, uint64_t config_hash) {
  return write_checkpoint_file(path, encode_checkpoint(s, config_hash));
}

std::string write_checkpoint_file(const std::string& path, const std::vector<char>& out) {
  std::vector<char> trailer;
  put(trailer, crc(out.data(), out.size()));
  protocol::ContentHash hash;
  write_durably(
      path,
      {std::string_view(out.data(), out.size()), std::string_view(trailer.data(), trailer.size())},
      &hash);
  return hash.hex();
}

namespace {
void compare_content_hash(const std::string& got, const std::string& want,
                          const std::string& name) {
  if (got != want)
    fail(name, "content hash " + got + ", its producer wrote " + want +
                   " (not the state it wrote: replaced or corrupted)");
}
}  // namespace

void check_content_hash(std::string_view bytes, const std::string& content_hash,
                        const std::string& name) {
  if (content_hash.empty()) return;  // unknown: a state recorded before content hashes
  compare_content_hash(protocol::content_hash(bytes), content_hash, name);
}

void check_file_content_hash(const std::string& path, const std::string& content_hash) {
  if (content_hash.empty()) {
    checked_file_size(path);  // still a regular file, opened without following a link
    return;
  }
  compare_content_hash(file_content_hash(path), content_hash, path);
}

std::string file_content_hash(const std::string& path) {
  auto [fd, size] = open_regular(path);
  protocol::ContentHash hash;
  std::vector<char> piece(size_t{1} << 20);
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd.get(), piece.data(), piece.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: " + error_text(errno));
    if (n == 0) break;
    hash.update(std::string_view(piece.data(), static_cast<size_t>(n)));
    at += n;
  }
  return hash.hex();
}

void write_checkpoint_bytes(const std::string& path, std::string_view bytes) {
  write_durably(path, {bytes});
}

TrainState load_checkpoint(const std::string& path, const CheckpointShape& expected,
                           const std::shared_ptr<const kernels::Backend>& backend,
                           const std::string& content_hash) {
  const int64_t want = expected.file_bytes();
  if (want < 0) fail(path, "the state it should hold has sizes out of range");
  auto [fd, size] = open_regular(path);
  // The size is checked before anything is allocated or read.
  if (size != want)
    fail(path, std::string(size < want ? "truncated" : "size mismatch") + ": " +
                   std::to_string(size) + " bytes, a checkpoint of this state (" +
                   std::to_string(expected.param_count) + " parameters, " +
                   std::to_string(expected.opt_state_count) + " optimizer values) has " +
                   std::to_string(want));
  std::vector<char> in(static_cast<size_t>(size));
  size_t got = 0;
  while (got < in.size()) {
    const ssize_t n = ::pread(fd.get(), in.data() + got, in.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed: " + error_text(errno));
    if (n == 0) fail(path, "truncated while it was read");
    got += static_cast<size_t>(n);
  }
  // Before a field is decoded: bytes its producer did not write are never a state.
  check_content_hash(std::string_view(in.data(), in.size()), content_hash, path);
  return read_checkpoint(std::string_view(in.data(), in.size()), path, expected, backend);
}

TrainState read_checkpoint(std::string_view in, const std::string& path,
                           const CheckpointShape& expected,
                           const std::shared_ptr<const kernels::Backend>& backend) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    fail(path, "not a hippo checkpoint (wrong magic)");
  if (in.size() < kHeaderSize + kTrailerSize)
    fail(path, "truncated: " + std::to_string(in.size()) + " bytes, shorter than the header");
  const uint32_t version = get<uint32_t>(in, 8);
  if (version != kVersion)
    fail(path, "version " + std::to_string(version) + ", this build reads version " +
                   std::to_string(kVersion));
  const uint64_t nparams = get<uint64_t>(in, 48), nopt = get<uint64_t>(in, 56);
  // Sizes from a corrupted header may be huge; compare without overflowing.
  const uint64_t body = in.size() - kHeaderSize - kTrailerSize;
  if (nparams > body / 4 || nopt > body / 4 || 4 * (nparams + nopt) != body)
    fail(path, "size mismatch: the header announces " + std::to_string(nparams) +
                   " parameters and " + std::to_string(nopt) + " optimizer values, the file has " +
                   std::to_string(in.size()) + " bytes (truncated or corrupted)");
  const uint32_t stored = get<uint32_t>(in, in.size() - kTrailerSize);
  if (crc(in.data(), in.size() - kTrailerSize) != stored)
    fail(path, "checksum mismatch (corrupted)");
  const uint32_t optimizer = get<uint32_t>(in, 12);
  if (optimizer >= kOptimizers.size())
    fail(path, "unknown optimizer code " + std::to_string(optimizer));
  const uint64_t hash = get<uint64_t>(in, 40);
  if (hash != expected.config_hash)
    fail(path, "made for config hash " + std::to_string(hash) + ", expected " +
                   std::to_string(expected.config_hash) + " (a different model, data or seed)");

  // A valid checksum says nothing of who wrote the file: every field must be the one the run
  // holds at this step (a forged data position would send the data loader out of bounds).
  TrainState s;
  s.step = get<int64_t>(in, 16);
  s.data_position = get<int64_t>(in, 24);
  s.rng_counter = get<uint64_t>(in, 32);
  s.optimizer = kOptimizers[optimizer];
  const std::string forged = " (corrupted, or not written by this run)";
  if (s.step != expected.step)
    fail(path, "step " + std::to_string(s.step) + ", the state continued from is at step " +
                   std::to_string(expected.step) + forged);
  if (s.data_position != expected.data_position)
    fail(path, "data_position " + std::to_string(s.data_position) + ", but " +
                   std::to_string(expected.step) + " steps of this run's batch sizes end at " +
                   std::to_string(expected.data_position) + forged);
  if (s.rng_counter != expected.rng_counter)
    fail(path, "rng_counter " + std::to_string(s.rng_counter) + ", expected " +
                   std::to_string(expected.rng_counter) + forged);
  if (s.optimizer != expected.optimizer)
    fail(path, "optimizer \"" + s.optimizer + "\", the run's is \"" + expected.optimizer + "\"" +
                   (expected.step == 0 ? " (none before the first step)" : "") + forged);
  if (nparams != static_cast<uint64_t>(expected.param_count) ||
      nopt != static_cast<uint64_t>(expected.opt_state_count))
    fail(path, std::to_string(nparams) + " parameters and " + std::to_string(nopt) +
                   " optimizer values, the model has " + std::to_string(expected.param_count) +
                   " and " + std::to_string(expected.opt_state_count) + forged);
  const char* body_start = in.data() + kHeaderSize;
  for (auto [v, count] : {std::pair{&s.params, nparams}, std::pair{&s.opt_state, nopt}}) {
    // The body is not aligned for floats: the backend copies bytes.
    *v = kernels::Buffer<float>(backend, static_cast<int64_t>(count));
    backend->copy_from_host(v->data(), body_start, v->bytes());
    body_start += 4 * count;
  }
  return s;
}

int64_t checked_file_size(const std::string& path) {
  return open_regular(path).second;
}

}  // namespace hippo::worker
