#include "searchers/sobol.h"

#include <array>
#include <stdexcept>

#include "searchers/pool_searcher.h"

namespace hippo {
namespace {

constexpr int kBits = 32;

// Dimensions 2 to 21 of S. Joe and F. Y. Kuo, "Constructing Sobol sequences with better
// two-dimensional projections", SIAM J. Sci. Comput. 30 (2008) 2635-2654: their file
// new-joe-kuo-6.21201 (https://web.maths.unsw.edu.au/~fkuo/sobol/), columns s (the degree of the
// primitive polynomial), a (its inner coefficients) and m_1 .. m_s (the initial direction
// numbers). Dimension 1 is van der Corput's (every m_k = 1).
struct Primitive {
  int s;
  uint32_t a;
  std::array<uint32_t, 7> m;
};
constexpr std::array<Primitive, kSobolDims - 1> kJoeKuo = {{
    {1, 0, {1}},
    {2, 1, {1, 3}},
    {3, 1, {1, 3, 1}},
    {3, 2, {1, 1, 1}},
    {4, 1, {1, 1, 3, 3}},
    {4, 4, {1, 3, 5, 13}},
    {5, 2, {1, 1, 5, 5, 17}},
    {5, 4, {1, 1, 5, 5, 5}},
    {5, 7, {1, 1, 7, 11, 19}},
    {5, 11, {1, 1, 5, 1, 1}},
    {5, 13, {1, 1, 1, 3, 11}},
    {5, 14, {1, 3, 5, 5, 31}},
    {6, 1, {1, 3, 3, 9, 7, 49}},
    {6, 13, {1, 1, 1, 15, 21, 21}},
    {6, 16, {1, 3, 1, 13, 27, 49}},
    {6, 19, {1, 1, 1, 15, 7, 5}},
    {6, 22, {1, 3, 1, 15, 13, 25}},
    {6, 25, {1, 1, 5, 5, 19, 61}},
    {7, 1, {1, 3, 7, 11, 23, 15, 103}},
    {7, 4, {1, 3, 7, 13, 13, 15, 69}},
}};

// The direction numbers V_1 .. V_32 of dimension `d` (from 0), left-aligned in 32 bits (Joe and
// Kuo's notes, "Notes on generating Sobol sequences", 2008).
std::array<uint32_t, kBits> directions(size_t d) {
  std::array<uint32_t, kBits> v{};
  if (d == 0) {
    for (int k = 0; k < kBits; ++k) v[k] = uint32_t{1} << (kBits - 1 - k);
    return v;
  }
  const Primitive& p = kJoeKuo[d - 1];
  for (int k = 0; k < kBits; ++k) {
    if (k < p.s) {
      v[k] = p.m[k] << (kBits - 1 - k);
      continue;
    }
    v[k] = v[k - p.s] ^ (v[k - p.s] >> p.s);
    for (int l = 1; l < p.s; ++l)
      if ((p.a >> (p.s - 1 - l)) & 1) v[k] ^= v[k - l];
  }
  return v;
}

// The parity of the set bits of x.
uint32_t parity(uint32_t x) {
  return static_cast<uint32_t>(__builtin_parity(x));
}

uint32_t random_bits(CounterRandom& random) {
  return static_cast<uint32_t>(random.next() * 0x1.0p32);
}

}  // namespace

void check_sobol_leaves(size_t leaves, const Field& at) {
  if (leaves > kSobolDims)
    at.fail("sobol covers at most " + std::to_string(kSobolDims) + " leaves; this space has " +
            std::to_string(leaves));
}

std::vector<double> sobol_point(uint64_t index, size_t dims, std::optional<uint64_t> seed) {
  if (dims > kSobolDims) throw std::invalid_argument("sobol: more than 21 dimensions");
  if (index >> kBits) throw std::invalid_argument("sobol: index beyond 2^32");
  const uint64_t gray = index ^ (index >> 1);
  std::vector<double> out(dims);
  for (size_t d = 0; d < dims; ++d) {
    std::array<uint32_t, kBits> v = directions(d);
    uint32_t shift = 0;
    if (seed) {
      // A random lower-triangular matrix with a unit diagonal (row r: digit r of the result from
      // digits 0 .. r of the direction number, digit 0 the most significant bit), then a random
      // digital shift: the stream is the dimension's, so each leaf has its own scramble.
      CounterRandom random(*seed, (uint64_t{1} << 62) + d);
      std::array<uint32_t, kBits> rows;
      for (int r = 0; r < kBits; ++r) {
        const uint32_t diagonal = uint32_t{1} << (kBits - 1 - r);
        const uint32_t above = r == 0 ? 0 : ~uint32_t{0} << (kBits - r);
        rows[r] = diagonal | (random_bits(random) & above);
      }
      for (uint32_t& x : v) {
        uint32_t scrambled = 0;
        for (int r = 0; r < kBits; ++r) scrambled |= parity(rows[r] & x) << (kBits - 1 - r);
        x = scrambled;
      }
      shift = random_bits(random);
    }
    uint32_t x = shift;
    for (int k = 0; k < kBits; ++k)
      if ((gray >> k) & 1) x ^= v[k];
    out[d] = double(x) * 0x1.0p-32;
  }
  return out;
}

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t permuted(uint64_t i, uint64_t n, uint64_t seed) {
  if (n > (uint64_t{1} << 62) || i >= n) throw std::invalid_argument("permuted: out of range");
  int half = 1;  // bits of each half: the domain is 4^half >= n
  while ((uint64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = i;
  do {  // a bijection of [0, 4^half); walked until it lands in [0, n)
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t next = left ^ (splitmix(seed ^ splitmix(round * 0x100000001b3 + right)) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

}  // namespace hippo
