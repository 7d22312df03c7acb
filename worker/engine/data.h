// Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist (gzip), and the order in
// which training reads it.
//
// Data order. The position of a run in its data is one integer, counted in samples:
//   position = epoch * N + offset,    0 <= offset <= N,
// where N is the number of training samples (a prefix of the set) and epoch e reads the samples
// in the order permutation(N, seed, e). A step with batch size B at position (e, offset) reads
// samples [offset, offset + B) of epoch e's order, if they fit (offset + B <= N); otherwise the
// rest of epoch e is dropped and the batch is the first B samples of epoch e + 1. So with a
// constant B an epoch is floor(N / B) steps and floor(N / B) * B samples, and a batch size that
// changes mid-epoch simply continues from the same offset. Everything is a pure function of
// (seed, position, B): no state besides the position.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hippo::worker {

struct Dataset {
  int64_t count = 0;
  int rows = 0, cols = 0;       // image size
  std::vector<uint8_t> pixels;  // [count, rows, cols]
  std::vector<int32_t> labels;  // [count], each in [0, 10)
  int64_t image_size() const { return int64_t{rows} * cols; }
};

// The split "train" or "t10k" of Fashion-MNIST in `dir` (files <split>-images-idx3-ubyte.gz and
// <split>-labels-idx1-ubyte.gz). Decompressed once per process and shared; throws
// std::runtime_error naming the file when one is missing or malformed.
std::shared_ptr<const Dataset> load_fashion_mnist(const std::string& dir, const std::string& split);

// The position after a step with batch size `batch` at `position` among n samples (the rule above;
// SampleOrder::take reads that step's samples). Throws std::invalid_argument if batch is not in
// [1, n] or position is negative (a state that no training produced).
int64_t next_position(int64_t n, int64_t position, int64_t batch);

// A permutation of [0, n) that is a pure function of (n, seed, epoch) (Fisher-Yates driven by the
// counter-based generator).
std::vector<int32_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

// The training order of N samples under a seed, with the last epoch's permutation cached.
class SampleOrder {
 public:
  SampleOrder(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  // Writes the `batch` sample indices that a step at `position` reads into indices[batch] and
  // returns the position after the step (next_position). Throws std::invalid_argument as
  // next_position does.
  int64_t take(int64_t position, int64_t batch, int32_t* indices);

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<int32_t> order_;
};

}  // namespace hippo::worker
