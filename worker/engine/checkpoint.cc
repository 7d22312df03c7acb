#include "worker/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

namespace hippo::worker {
namespace {

constexpr char kMagic[8] = {'H', 'I', 'P', 'P', 'O', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 64;
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

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t done = ::write(fd, data, n);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) fail(path, std::string("write failed: ") + std::strerror(errno));
    data += done;
    n -= static_cast<size_t>(done);
  }
}

}  // namespace

std::vector<char> encode_checkpoint(const TrainState& s, uint64_t config_hash) {
  uint32_t optimizer = 0;
  while (optimizer < kOptimizers.size() && s.optimizer != kOptimizers[optimizer]) ++optimizer;
  if (optimizer == kOptimizers.size())
    throw CheckpointError("cannot save a state of the unknown optimizer \"" + s.optimizer + "\"");

  std::vector<char> out(kMagic, kMagic + sizeof kMagic);
  out.reserve(kHeaderSize + static_cast<size_t>(s.params.bytes() + s.opt_state.bytes()) + 4);
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

void save_checkpoint(const std::string& path, const TrainState& s, uint64_t config_hash) {
  write_checkpoint_file(path, encode_checkpoint(s, config_hash));
}

void write_checkpoint_file(const std::string& path, const std::vector<char>& out) {
  std::vector<char> trailer;
  put(trailer, crc(out.data(), out.size()));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, out.data(), out.size(), path);
    write_all(fd, trailer.data(), trailer.size(), path);
    if (::fsync(fd) != 0) fail(path, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp + ": " + std::strerror(err));
  }
  // Make the rename itself durable.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

TrainState load_checkpoint(const std::string& path, uint64_t expected_config_hash,
                           const std::shared_ptr<const kernels::Backend>& backend) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open: " + std::string(std::strerror(errno)));
  const std::vector<char> in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return read_checkpoint(std::string_view(in.data(), in.size()), path, expected_config_hash,
                         backend);
}

TrainState read_checkpoint(std::string_view in, const std::string& path,
                           uint64_t expected_config_hash,
                           const std::shared_ptr<const kernels::Backend>& backend) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    fail(path, "not a hippo checkpoint (wrong magic)");
  if (in.size() < kHeaderSize + 4)
    fail(path, "truncated: " + std::to_string(in.size()) + " bytes, shorter than the header");
  const uint32_t version = get<uint32_t>(in, 8);
  if (version != kVersion)
    fail(path, "version " + std::to_string(version) + ", this build reads version " +
                   std::to_string(kVersion));
  const uint64_t nparams = get<uint64_t>(in, 48), nopt = get<uint64_t>(in, 56);
  // Sizes from a corrupted header may be huge; compare without overflowing.
  const uint64_t body = in.size() - kHeaderSize - 4;
  if (nparams > body / 4 || nopt > body / 4 || 4 * (nparams + nopt) != body)
    fail(path, "size mismatch: the header announces " + std::to_string(nparams) +
                   " parameters and " + std::to_string(nopt) + " optimizer values, the file has " +
                   std::to_string(in.size()) + " bytes (truncated or corrupted)");
  const uint32_t stored = get<uint32_t>(in, in.size() - 4);
  if (crc(in.data(), in.size() - 4) != stored) fail(path, "checksum mismatch (corrupted)");
  const uint32_t optimizer = get<uint32_t>(in, 12);
  if (optimizer >= kOptimizers.size())
    fail(path, "unknown optimizer code " + std::to_string(optimizer));
  const uint64_t hash = get<uint64_t>(in, 40);
  if (hash != expected_config_hash)
    fail(path, "made for config hash " + std::to_string(hash) + ", expected " +
                   std::to_string(expected_config_hash) + " (a different model, data or seed)");

  TrainState s;
  s.step = get<int64_t>(in, 16);
  s.data_position = get<int64_t>(in, 24);
  s.rng_counter = get<uint64_t>(in, 32);
  s.optimizer = kOptimizers[optimizer];
  const char* body_start = in.data() + kHeaderSize;
  for (auto [v, count] : {std::pair{&s.params, nparams}, std::pair{&s.opt_state, nopt}}) {
    // The body is not aligned for floats: the backend copies bytes.
    *v = kernels::Buffer<float>(backend, static_cast<int64_t>(count));
    backend->copy_from_host(v->data(), body_start, v->bytes());
    body_start += 4 * count;
  }
  return s;
}

}  // namespace hippo::worker
