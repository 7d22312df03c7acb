// Random inputs for the kernel tests: n floats uniform in [lo, hi), a pure function of the seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hippo::kernels::test_data {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace hippo::kernels::test_data
