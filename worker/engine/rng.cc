#include "worker/engine/rng.h"

#include <array>

namespace hippo::worker {
namespace {

// Philox4x32-10 with the constants of the paper (and of Random123, cuRAND, PyTorch).
std::array<uint32_t, 4> philox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * ctr[0], p1 = uint64_t{kMul1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key = {key[0] + kWeyl0, key[1] + kWeyl1};
  }
  return ctr;
}

}  // namespace

uint64_t random_u64(uint64_t seed, RngPurpose purpose, uint32_t stream, uint64_t index) {
  // Counter words: index (low, high), stream, purpose; key: the seed.
  const std::array<uint32_t, 4> out =
      philox({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream,
              static_cast<uint32_t>(purpose)},
             {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return uint64_t{out[0]} << 32 | out[1];
}

float random_uniform(uint64_t seed, RngPurpose purpose, uint32_t stream, uint64_t index) {
  return static_cast<float>(random_u64(seed, purpose, stream, index) >> 40) * 0x1.0p-24f;
}

}  // namespace hippo::worker
