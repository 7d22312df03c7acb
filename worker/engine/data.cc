#include "worker/engine/data.h"

#include <zlib.h>

#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "worker/engine/rng.h"

namespace hippo::worker {
namespace {

// The whole decompressed content of a gzip file.
std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open data file " + path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int got;
  while ((got = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + got);
  const bool failed = got < 0;
  gzclose(f);
  if (failed) throw std::runtime_error("cannot decompress data file " + path);
  return out;
}

uint32_t big_endian_u32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

// Checks an IDX header (magic 0x0000080<dims>, unsigned bytes) and returns its dimensions.
std::vector<int64_t> idx_dims(const std::vector<uint8_t>& b, uint32_t dims,
                              const std::string& path) {
  if (b.size() < 4 + 4 * dims || big_endian_u32(b, 0) != (0x800u | dims))
    throw std::runtime_error(path + ": not an IDX file of unsigned bytes with " +
                             std::to_string(dims) + " dimension(s)");
  std::vector<int64_t> out;
  int64_t total = 1;
  for (uint32_t i = 0; i < dims; ++i) {
    out.push_back(big_endian_u32(b, 4 + 4 * i));
    total *= out.back();
  }
  if (b.size() != 4 + 4 * dims + static_cast<size_t>(total))
    throw std::runtime_error(path + ": expected " + std::to_string(total) +
                             " bytes of data after the header, found " +
                             std::to_string(b.size() - 4 - 4 * dims));
  return out;
}

std::shared_ptr<const Dataset> read_split(const std::string& dir, const std::string& split) {
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> images = read_gzip(images_path), labels = read_gzip(labels_path);
  const std::vector<int64_t> idims = idx_dims(images, 3, images_path);
  const std::vector<int64_t> ldims = idx_dims(labels, 1, labels_path);
  if (idims[0] != ldims[0])
    throw std::runtime_error(images_path + " has " + std::to_string(idims[0]) + " images but " +
                             labels_path + " has " + std::to_string(ldims[0]) + " labels");
  auto ds = std::make_shared<Dataset>();
  ds->count = idims[0];
  ds->rows = static_cast<int>(idims[1]);
  ds->cols = static_cast<int>(idims[2]);
  ds->pixels.assign(images.begin() + 16, images.end());
  ds->labels.reserve(ds->count);
  for (auto it = labels.begin() + 8; it != labels.end(); ++it) {
    if (*it >= 10)
      throw std::runtime_error(labels_path + ": label " + std::to_string(*it) +
                               " is not in [0, 10)");
    ds->labels.push_back(*it);
  }
  return ds;
}

}  // namespace

std::shared_ptr<const Dataset> load_fashion_mnist(const std::string& dir,
                                                  const std::string& split) {
  if (split != "train" && split != "t10k")
    throw std::invalid_argument("unknown Fashion-MNIST split \"" + split + "\" (train or t10k)");
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::shared_ptr<const Dataset>> cache;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const Dataset>& slot = cache[{dir, split}];
  if (!slot) slot = read_split(dir, split);
  return slot;
}

std::vector<int32_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t r = random_u64(seed, RngPurpose::kShuffle, static_cast<uint32_t>(epoch), i);
    std::swap(p[i], p[r % static_cast<uint64_t>(i + 1)]);
  }
  return p;
}

int64_t next_position(int64_t n, int64_t position, int64_t batch) {
  if (batch < 1 || batch > n)
    throw std::invalid_argument("batch_size " + std::to_string(batch) + " must be in [1, " +
                                std::to_string(n) + "] (the number of training samples)");
  // Negative: no training produced it; so large that the next epoch's end would overflow: neither.
  if (position < 0 || position > std::numeric_limits<int64_t>::max() - 2 * n)
    throw std::invalid_argument("data position " + std::to_string(position) +
                                " is outside [0, 2^63 - 2N]");
  // position == (e + 1) * N (offset N of epoch e) reads as (e + 1, 0): the same next batch.
  if (position % n + batch <= n) return position + batch;
  return (position / n + 1) * n + batch;  // the rest of the epoch is dropped
}

int64_t SampleOrder::take(int64_t position, int64_t batch, int32_t* indices) {
  const int64_t next = next_position(n_, position, batch);
  const int64_t epoch = (next - batch) / n_, offset = (next - batch) % n_;
  if (epoch != cached_epoch_) {
    order_ = permutation(n_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  std::copy(order_.begin() + offset, order_.begin() + offset + batch, indices);
  return next;
}

}  // namespace hippo::worker
