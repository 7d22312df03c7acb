// The body of the CPU direct convolutions (cpu_conv.h), written once over the instruction-set
// traits type I of cpu_gemm_impl.h, which adds the tile sizes:
//
//   static constexpr int kConvMr, kConvNv;    // forward: kConvMr positions x kConvNv vectors of
//                                             // output channels
//   static constexpr int kWgradMr, kWgradNv;  // weight gradient: kWgradMr rows r = (c, ki, kj) x
//                                             // kWgradNv vectors of output channels
//
// Forward: the images of a chunk are copied zero-padded (xp[c, b, Hp, Wp]), so that the input of
// output position (oy, ox) and weight row r = (c, ki, kj) is xp[c, b, oy + ki, ox + kj]: for a
// run of positions within one output row, consecutive addresses. A tile holds a run of up to
// kConvMr positions of one row for one block of output channels, sums over every r in order, and
// is written to the CNHW output transposed. Weight gradient: a tile holds kWgradMr rows r for one
// block of output channels and sums over the positions in order, the output gradient of the
// chunk transposed to positions x channels so that a position's channels are one vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu_conv.h"

namespace hippo::kernels::cpu::impl {

// The sizes every kernel derives from a ConvShape.
struct ConvGeometry {
  int k, pad, h, w, ho, wo, hp, wp;
  int64_t rows, plane;  // Cin*k*k; Ho*Wo
  explicit ConvGeometry(const ConvShape& s)
      : k(s.kernel),
        pad(s.pad),
        h(s.height),
        w(s.width),
        ho(s.out_height()),
        wo(s.out_width()),
        hp(s.height + 2 * s.pad),
        wp(s.width + 2 * s.pad),
        rows(s.col_rows()),
        plane(int64_t{s.out_height()} * s.out_width()) {}
  // Offset in xp (channels from c0, nb images) of weight row r's input for position (0, 0).
  int64_t offset(int64_t r, int c0, int nb) const {
    const int64_t c = r / (k * k), ki = r / k % k, kj = r % k;
    return ((c - c0) * nb * hp + ki) * wp + kj;
  }
};

// xp[c - c0, b, :, :] for c in [c0, c1), b in [0, nb): image b of the chunk x, channel c,
// zero-padded to hp x wp (a negative pad crops), followed by `slack` zeros.
inline void pad_images(const ConvGeometry& g, Chunk<const float> x, int c0, int c1, int nb,
                       float* xp, int slack) {
  // Columns [lo, hi) of a padded row hold the image's columns lo - pad, ...
  const int lo = std::clamp(g.pad, 0, g.wp), hi = std::clamp(g.pad + g.w, lo, g.wp);
  float* dst = xp;
  for (int c = c0; c < c1; ++c)
    for (int b = 0; b < nb; ++b) {
      const float* src = x.at(c, b, int64_t{g.h} * g.w);
      for (int yy = 0; yy < g.hp; ++yy, dst += g.wp) {
        const int iy = yy - g.pad;
        if (iy < 0 || iy >= g.h) {
          std::fill(dst, dst + g.wp, 0.0f);
          continue;
        }
        std::fill(dst, dst + lo, 0.0f);
        std::memcpy(dst + lo, src + int64_t{iy} * g.w + lo - g.pad, sizeof(float) * (hi - lo));
        std::fill(dst + hi, dst + g.wp, 0.0f);
      }
    }
  std::fill(dst, dst + slack, 0.0f);
}

template <class I>
struct Conv {
  using V = typename I::V;
  static constexpr int L = I::kLanes;
  static constexpr int MR = I::kConvMr, NV = I::kConvNv, NR = NV * L;
  static constexpr int WR = I::kWgradMr, WV = I::kWgradNv, WN = WV * L;
  static_assert(NR <= kMaxNr && WN <= kMaxNr && kMaxNr % NR == 0 && kMaxNr % WN == 0);
  static_assert(WR <= kConvAccSlackRows);
  // Rows of packed weights (of NR floats) per slice of the forward sum: 40 KB at NR = 32.
  static constexpr int64_t kSliceRows = 320;

  // packed[cb, r, j] = w[cb * NR + j, r], 0 past the last output channel.
  static void pack_weights(const ConvShape& s, const float* w, float* packed) {
    const int64_t rows = s.col_rows();
    const int blocks = (s.out_channels + NR - 1) / NR;
    for (int cb = 0; cb < blocks; ++cb)
      for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < NR; ++j) {
          const int co = cb * NR + j;
          packed[(cb * rows + r) * NR + j] = co < s.out_channels ? w[co * rows + r] : 0.0f;
        }
  }

  // The MR x NR tile t[i, j] (+)= sum over r of a(r)[i] pw[r, j] (+ bias[j]), a(r) = row + off[r]:
  // from t's contents when `load`, else from 0.
  static inline void forward_tile(int64_t rows, const float* pw, const float* row,
                                  const int64_t* off, bool load, const float* bias, float* t) {
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = load ? I::load(t + i * NR + v * L) : I::zero();
    for (int64_t r = 0; r < rows; ++r) {
      V bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = I::load(pw + r * NR + v * L);
      const float* a = row + off[r];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const V av = I::broadcast(a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = I::fma(av, bv[v], acc[i][v]);
      }
    }
    if (bias)
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = I::add(acc[i][v], I::load(bias + v * L));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) I::store(t + i * NR + v * L, acc[i][v]);
  }

  // dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols.
  static void transpose(const float* src, int64_t lds, int rows, int cols, float* dst,
                        int64_t ldd) {
    const int rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (int j = 0; j < cols8; j += 8)
      for (int i = 0; i < rows8; i += 8)
        I::transpose8x8(src + i * lds + j, lds, dst + j * ldd + i, ldd);
    for (int j = 0; j < cols; ++j)
      for (int i = j < cols8 ? rows8 : 0; i < rows; ++i) dst[j * ldd + i] = src[i * lds + j];
  }

  // y = the convolution of the chunk x (+ bias), from the packed weights.
  static void forward(const ConvShape& s, Chunk<const float> x, const float* packed,
                      const float* bias, Chunk<float> y, int nb, float* work) {
    const ConvGeometry g(s);
    planes(s, g, x, packed, bias, nb, work, [&](int b, int cb, const float* staged, float*) {
      transpose(staged, NR, static_cast<int>(g.plane), std::min(NR, s.out_channels - cb * NR),
                y.at(cb * NR, b, g.plane), y.batch * g.plane);
    });
  }

  // y = relu(maxpool(conv(x)) + bias) of the chunk x, with codes[co, b, q] (bytes, indexed as y)
  // the position of the first maximum in window q (0..3, row-major): the convolution's planes
  // are pooled from the staged plane, never stored.
  static void forward_pool(const ConvShape& s, Chunk<const float> x, const float* packed,
                           const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                           float* work) {
    const ConvGeometry g(s);
    const int hq = g.ho / 2, wq = g.wo / 2, windows = hq * wq;
    planes(s, g, x, packed, nullptr, nb, work,
           [&](int b, int cb, const float* staged, float* spare) {
             // spare: the pooled plane [windows, NR], then its codes [windows, NR].
             float* pooled = spare;
             uint8_t* code = reinterpret_cast<uint8_t*>(spare + int64_t{windows} * NR);
             float block_bias[NR];
             for (int j = 0; j < NR; ++j)
               block_bias[j] = cb * NR + j < s.out_channels ? bias[cb * NR + j] : 0.0f;
             for (int py = 0; py < hq; ++py)
               for (int px = 0; px < wq; ++px) {
                 const float* p00 = staged + (int64_t{2 * py} * g.wo + 2 * px) * NR;
                 const float *p01 = p00 + NR, *p10 = p00 + g.wo * NR, *p11 = p10 + NR;
                 const int64_t q = (int64_t{py} * wq + px) * NR;
                 // As maxpool_forward and maxpool_backward (the first maximum), bias_forward and
                 // relu_forward: the same values. Selects, not branches, so that it vectorizes.
                 for (int j = 0; j < NR; ++j) {
                   const float m = std::max(std::max(p00[j], p01[j]), std::max(p10[j], p11[j]));
                   uint8_t first = 3;
                   first = p10[j] == m ? 2 : first;
                   first = p01[j] == m ? 1 : first;
                   first = p00[j] == m ? 0 : first;
                   code[q + j] = first;
                   const float v = m + block_bias[j];
                   pooled[q + j] = v > 0 ? v : 0.0f;
                 }
               }
             const int channels = std::min(NR, s.out_channels - cb * NR);
             transpose(pooled, NR, windows, channels, y.at(cb * NR, b, windows), y.batch * windows);
             for (int j = 0; j < channels; ++j) {
               uint8_t* dst = codes.at(cb * NR + j, b, windows);
               for (int q = 0; q < windows; ++q) dst[q] = code[int64_t{q} * NR + j];
             }
           });
  }

  // Computes, for each image b of the chunk and block cb of output channels, the plane
  // staged[position, j] = the convolution's output (+ bias) for channel cb * NR + j, and calls
  // out(b, cb, staged, spare) (spare: plane * NR floats of scratch).
  template <typename Out>
  static void planes(const ConvShape& s, const ConvGeometry& g, Chunk<const float> x,
                     const float* packed, const float* bias, int nb, float* work, const Out& out) {
    // work: xp (a run of MR positions at a row's end reads up to MR + k past it), the offsets of
    // the weight rows, the bias per block of channels, the staged plane and the spare one.
    const int slack = MR + g.k;
    const int64_t xp_size = int64_t{s.in_channels} * nb * g.hp * g.wp + slack;
    float* xp = work;
    pad_images(g, x, 0, s.in_channels, nb, xp, slack);
    int64_t* off = reinterpret_cast<int64_t*>(xp + (xp_size + 15) / 16 * 16);
    for (int64_t r = 0; r < g.rows; ++r) off[r] = g.offset(r, 0, nb);
    // The bias per block of channels, 0 past the last channel.
    const int blocks = (s.out_channels + NR - 1) / NR;
    float* bias_block = reinterpret_cast<float*>(off + g.rows);
    for (int j = 0; j < blocks * NR; ++j)
      bias_block[j] = bias && j < s.out_channels ? bias[j] : 0.0f;
    // Each plane of output positions x channels is staged, then written out (from memory the
    // tiles left a while ago, rather than through a store and reload of each tile).
    float* staged = bias_block + blocks * NR;
    float* spare = staged + g.plane * NR;
    // The sum over r in slices whose packed weights stay in the L1 cache (kSliceRows x NR floats)
    // while every position of the plane uses them; between slices a tile goes through the staged
    // plane (an exact fp32 store and load: the chain is unchanged).
    const int64_t slices = (g.rows + kSliceRows - 1) / kSliceRows;
    const int64_t slice_rows = (g.rows + slices - 1) / slices;
    alignas(64) float edge[MR * NR];
    for (int b = 0; b < nb; ++b)
      for (int cb = 0; cb < blocks; ++cb) {
        const float* pb = bias ? bias_block + cb * NR : nullptr;
        for (int64_t r0 = 0; r0 < g.rows; r0 += slice_rows) {
          const int64_t rows = std::min(slice_rows, g.rows - r0);
          const float* pw = packed + (cb * g.rows + r0) * NR;
          const bool load = r0 > 0, last = r0 + rows == g.rows;
          for (int oy = 0; oy < g.ho; ++oy)
            for (int ox0 = 0; ox0 < g.wo; ox0 += MR) {
              const float* row = xp + (int64_t{b} * g.hp + oy) * g.wp + ox0;
              float* t = staged + (int64_t{oy} * g.wo + ox0) * NR;
              const int mr = std::min(MR, g.wo - ox0);
              if (mr == MR) {
                forward_tile(rows, pw, row, off + r0, load, last ? pb : nullptr, t);
                continue;
              }
              // A run shorter than MR at a row's end: its tile through `edge`.
              if (load) std::copy(t, t + mr * NR, edge);
              forward_tile(rows, pw, row, off + r0, load, last ? pb : nullptr, edge);
              std::copy(edge, edge + mr * NR, t);
            }
        }
        out(b, cb, staged, spare);
      }
  }

  static void weight_grad(const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                          float* acc, int r0, int r1, int nb, float* work) {
    const ConvGeometry g(s);
    const int taps = g.k * g.k;
    const int c0 = r0 / taps, c1 = (r1 - 1) / taps + 1;
    const int64_t width = conv_acc_width(s), positions = int64_t{nb} * g.plane;
    // work: xp of channels [c0, c1), then dyt[cb, p, j] = dy[cb * WN + j, p] (the chunk's
    // positions p in order; 0 past the last channel), then the offsets of rows [r0, r1).
    const int64_t xp_size = int64_t{c1 - c0} * nb * g.hp * g.wp;
    float* xp = work;
    pad_images(g, x, c0, c1, nb, xp, 0);
    float* dyt = xp + (xp_size + 15) / 16 * 16;
    const int blocks = (s.out_channels + WN - 1) / WN;
    for (int cb = 0; cb < blocks; ++cb) {
      const int channels = std::min(WN, s.out_channels - cb * WN);
      float* dst = dyt + cb * positions * WN;
      transpose(dy.at(cb * WN, 0, g.plane), dy.batch * g.plane, channels,
                static_cast<int>(positions), dst, WN);
      for (int64_t p = 0; p < positions; ++p)
        std::fill(dst + p * WN + channels, dst + (p + 1) * WN, 0.0f);
    }
    int64_t* off = reinterpret_cast<int64_t*>(dyt + blocks * positions * WN);
    for (int r = r0; r < r1; ++r) off[r - r0] = g.offset(r, c0, nb);

    for (int rg = r0; rg < r1; rg += WR) {
      // Rows past r1 read row rg's input and land in acc's slack rows.
      int64_t o[WR];
      for (int i = 0; i < WR; ++i) o[i] = off[rg + i < r1 ? rg + i - r0 : rg - r0];
      for (int cb = 0; cb < blocks; ++cb) {
        float* tile = acc + (rg - r0) * width + cb * WN;
        V a[WR][WV];
#pragma GCC unroll 16
        for (int i = 0; i < WR; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < WV; ++v) a[i][v] = I::load(tile + i * width + v * L);
        const float* pb = dyt + cb * positions * WN;
        for (int b = 0; b < nb; ++b)
          for (int oy = 0; oy < g.ho; ++oy) {
            const float* base = xp + (int64_t{b} * g.hp + oy) * g.wp;
            const float* prow = pb + (int64_t{b} * g.plane + int64_t{oy} * g.wo) * WN;
            for (int ox = 0; ox < g.wo; ++ox) {
              V bv[WV];
#pragma GCC unroll 4
              for (int v = 0; v < WV; ++v) bv[v] = I::load(prow + ox * WN + v * L);
#pragma GCC unroll 16
              for (int i = 0; i < WR; ++i) {
                const V av = I::broadcast(base[o[i] + ox]);
#pragma GCC unroll 4
                for (int v = 0; v < WV; ++v) a[i][v] = I::fma(av, bv[v], a[i][v]);
              }
            }
          }
#pragma GCC unroll 16
        for (int i = 0; i < WR; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < WV; ++v) I::store(tile + i * width + v * L, a[i][v]);
      }
    }
  }
};

}  // namespace hippo::kernels::cpu::impl
