// The body of the CPU matrix product (cpu_gemm.h), written once over an instruction-set traits
// type I and included by one .cc per instruction set, each compiled with its own target flags and
// -ffp-contract=off (the only fused multiply-adds are the explicit ones of the chain):
//
//   struct I {
//     using V = ...;                            // a vector of kLanes floats
//     static constexpr int kLanes, kMr, kNv;    // register tile: kMr rows x kNv vectors of C
//     static constexpr int kMrNarrow;           // rows of the tile of one vector (narrow C)
//     static V zero(); static V load(const float*); static void store(float*, V);
//     static V load_first(const float*, int n);         // lanes [0, n) (0 < n <= kLanes), rest 0
//     static void store_first(float*, V, int n);        // lanes [0, n) only
//     static V broadcast(float); static V fma(V a, V b, V c);  // a * b + c, rounded once
//     static V add(V, V); static V relu(V);     // relu: v > 0 ? v : 0, as the scalar code
//     static void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd);
//   };                                          // dst[c * ldd + r] = src[r * lds + c], r, c < 8
//
// Structure (BLIS): for each block of kNc columns and slice of kKc values of p, B's slice is
// packed into panels of kKc x NR (NR = kNv * kLanes, row after row), or read in place where its
// rows are contiguous and an odd number of cache lines apart; the micro-kernel multiplies
// kMr rows of A by one B panel into a kMr x NR tile of C held in registers, broadcasting A's
// values. A is read in place when its rows or its columns are contiguous (packing it would only
// copy it: the tiles of a block of kMc rows keep it in cache), else packed into panels of
// kMr x kKc. Between slices, the tile goes through C in memory (an fp32 store and load: the chain
// is unchanged). Edges: a last panel of columns that leaves whole vectors of the tile empty runs
// on a tile of fewer vectors, and a last vector that is partly outside C is loaded and stored
// with a mask; a tile of fewer than kMr rows runs in full on zero-padded panels into a local
// tile, of which only the valid part is copied. An epilogue's SGD step (cpu_optimizer_impl.h's
// sgd_step, the same operations as sgd_update) runs on the tile in registers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu_gemm.h"
#include "kernels/cpu_optimizer_impl.h"

namespace hippo::kernels::cpu::impl {

// Where a product's operands are for one block of C: rows ic.. (mc of them) of A and C, the slice
// of p from pc (kc values), and how A is read.
struct Block {
  View a;
  float* c;
  int64_t ldc;
  bool transposed_c;
  float* pa;  // A's packed panels (those of the block that are not read in place)
  bool in_place, rows_of_a, load;
  const Epilogue* last;  // the epilogue, on the last slice of p
  int ic, mc, pc, kc;
};

template <class I, int MR, int NV>
struct Gemm {
  using V = typename I::V;
  static constexpr int L = I::kLanes, NR = NV * L;
  static_assert(MR <= kMaxMr && NR <= kMaxNr);

  // dst[p * MR + i] = a[i0 + i, p0 + p] for i < mr, 0 for mr <= i < MR.
  static void pack_a(View a, int i0, int mr, int p0, int kc, float* dst) {
    if (a.rs == 1) {  // columns of A are contiguous: copies
      for (int p = 0; p < kc; ++p) copy_padded<MR>(a.p + (p0 + p) * a.cs + i0, mr, dst + p * MR);
      return;
    }
    transpose_padded<MR>(a.p + i0 * a.rs + p0 * a.cs, a.rs, a.cs, mr, kc, dst);
  }

  // dst[p * NR + j] = b[p0 + p, j0 + j] for j < nr, 0 for nr <= j < NR.
  static void pack_b(View b, int p0, int kc, int j0, int nr, float* dst) {
    if (b.cs == 1) {  // rows of B are contiguous: copies
      for (int p = 0; p < kc; ++p) copy_padded<NR>(b.p + (p0 + p) * b.rs + j0, nr, dst + p * NR);
      return;
    }
    transpose_padded<NR>(b.p + j0 * b.cs + p0 * b.rs, b.cs, b.rs, nr, kc, dst);
  }

  // dst[0, W) = src[0, n), then zeros.
  template <int W>
  static void copy_padded(const float* src, int n, float* dst) {
    if (n == W) {
      std::memcpy(dst, src, sizeof(float) * W);
      return;
    }
    std::memcpy(dst, src, sizeof(float) * n);
    std::fill(dst + n, dst + W, 0.0f);
  }

  // dst[q * W + r] = src[r * rs + q * qs] for r < n, q < len; 0 for n <= r < W. Rows of src
  // (r) become columns of dst: in 8 x 8 blocks through registers where src's q is contiguous.
  template <int W>
  static void transpose_padded(const float* src, int64_t rs, int64_t qs, int n, int len,
                               float* dst) {
    const int n8 = qs == 1 ? n / 8 * 8 : 0;
    int q0 = 0;
    for (; n8 > 0 && q0 + 8 <= len; q0 += 8) {
      for (int r = 0; r < n8; r += 8) I::transpose8x8(src + r * rs + q0, rs, dst + q0 * W + r, W);
      for (int q = q0; q < q0 + 8; ++q) {
        float* d = dst + q * W;
        for (int r = n8; r < n; ++r) d[r] = src[r * rs + q];
        for (int r = n; r < W; ++r) d[r] = 0.0f;
      }
    }
    for (int q = q0; q < len; ++q) {
      float* d = dst + q * W;
      for (int r = 0; r < n; ++r) d[r] = src[r * rs + q * qs];
      for (int r = n; r < W; ++r) d[r] = 0.0f;
    }
  }

  // The epilogue's bias and ReLU on one value (the scalar twin of the vector code below).
  static float finish(float v, const Epilogue& e, int i, int j) {
    if (e.row_bias) v += e.row_bias[i];
    if (e.col_bias) v += e.col_bias[j];
    if (e.relu) v = v > 0 ? v : 0.0f;
    return v;
  }

  // The end of the value (i, j) of C, v before the epilogue: stored at c (C's element), or with
  // the epilogue's SGD step, that step.
  static void finish_at(float v, const Epilogue& e, int i, int j, float* c) {
    v = finish(v, e, i, j);
    if (!e.sgd) {
      *c = v;
      return;
    }
    const SgdStep& s = *e.sgd;
    const int64_t at = i * s.ld + j;
    float unused = 0;
    float& m = s.momentum ? s.momentum[at] : unused;
    switch (sgd_kind(s.hp)) {
      case SgdKind::kPlain:
        return sgd_step<SgdKind::kPlain>(s.params[at], m, v, s.hp);
      case SgdKind::kMomentum:
        return sgd_step<SgdKind::kMomentum>(s.params[at], m, v, s.hp);
      case SgdKind::kNesterov:
        break;
    }
    sgd_step<SgdKind::kNesterov>(s.params[at], m, v, s.hp);
  }

  // The SGD step of the parameters of a tile at rows i0.., columns j0.. with their gradient g
  // (tail valid lanes of the last vector).
  template <SgdKind kKind>
  static void sgd_tile(const SgdStep& s, V (&g)[MR][NV], int i0, int j0, int tail) {
    const SgdParams hp = s.hp;  // a copy, which the stores to the parameters cannot alias
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const int64_t at = (i0 + i) * s.ld + j0 + v * L;
        const bool whole = v < NV - 1 || tail == L;
        V p = whole ? I::load(s.params + at) : I::load_first(s.params + at, tail);
        V m = I::zero();
        if (kKind != SgdKind::kPlain)
          m = whole ? I::load(s.momentum + at) : I::load_first(s.momentum + at, tail);
        sgd_step<kKind>(p, m, g[i][v], hp);
        if (whole) {
          I::store(s.params + at, p);
          if (kKind != SgdKind::kPlain) I::store(s.momentum + at, m);
        } else {
          I::store_first(s.params + at, p, tail);
          if (kKind != SgdKind::kPlain) I::store_first(s.momentum + at, m, tail);
        }
      }
  }

  // The kMr x NR tile t (rows ldt apart) += a x panel b over kc values of p, of which the first
  // nr columns (NR - L < nr <= NR) are read and written (the last vector's other lanes are
  // computed on the panel's zero padding and dropped); t starts from its contents when `load`,
  // else from 0. With `last`, the epilogue's bias and ReLU follow, for the tile at rows i0..,
  // columns j0.. of C. A's value (i, p) is a[i * lda + p] when kRowsOfA (A read in place,
  // row-major), else a[p * lda + i] (a packed panel, lda = MR, or A stored transposed, read in
  // place).
  template <bool kRowsOfA>
  static inline void tile(int kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float* t, int64_t ldt, bool load, const Epilogue* last, int i0, int j0,
                          int nr) {
    const int tail = nr - (NV - 1) * L;  // valid lanes of the last vector
    auto load_c = [&](const float* p, int v) {
      return v < NV - 1 || tail == L ? I::load(p) : I::load_first(p, tail);
    };
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = load ? load_c(t + i * ldt + v * L, v) : I::zero();
    for (int p = 0; p < kc; ++p) {
      V bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = I::load(b + p * ldb + v * L);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const V av = I::broadcast(kRowsOfA ? a[i * lda + p] : a[p * lda + i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = I::fma(av, bv[v], acc[i][v]);
      }
    }
    if (last) {
      const Epilogue& e = *last;
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        if (e.row_bias) {
          const V rb = I::broadcast(e.row_bias[i0 + i]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = I::add(acc[i][v], rb);
        }
        if (e.col_bias)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v)
            acc[i][v] = I::add(acc[i][v], load_c(e.col_bias + j0 + v * L, v));
        if (e.relu)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = I::relu(acc[i][v]);
      }
    }
    if (last && last->sgd) {
      switch (sgd_kind(last->sgd->hp)) {
        case SgdKind::kPlain:
          return sgd_tile<SgdKind::kPlain>(*last->sgd, acc, i0, j0, tail);
        case SgdKind::kMomentum:
          return sgd_tile<SgdKind::kMomentum>(*last->sgd, acc, i0, j0, tail);
        case SgdKind::kNesterov:
          return sgd_tile<SgdKind::kNesterov>(*last->sgd, acc, i0, j0, tail);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (v < NV - 1 || tail == L)
          I::store(t + i * ldt + v * L, acc[i][v]);
        else
          I::store_first(t + i * ldt + v * L, acc[i][v], tail);
      }
  }

  // Where C's value (i, j) is, for C at c with rows (or, transposed, columns) ldc apart.
  static float* at(float* c, int64_t ldc, bool transposed, int i, int j) {
    return transposed ? c + j * ldc + i : c + i * ldc + j;
  }

  // A tile of C at (i0, j0) (c: its first value) with mr valid rows and nr valid columns
  // (NR - L < nr <= NR): in place when its rows are whole and C is not transposed, else through a
  // local tile. A whole tile of a transposed C moves in 8 x 8 transpositions where the tile is
  // made of them (the epilogue runs in registers); other edges move value by value (the epilogue
  // then runs on the valid values only, in scalar code).
  template <bool kRowsOfA>
  static void edge_or_tile(int kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float* c, int64_t ldc, bool transposed, bool load, const Epilogue* last,
                           int i0, int j0, int mr, int nr) {
    if (mr == MR && !transposed) {
      tile<kRowsOfA>(kc, a, lda, b, ldb, c, ldc, load, last, i0, j0, nr);
      return;
    }
    alignas(64) float t[MR * NR] = {};
    if (mr == MR && nr == NR && MR % 8 == 0 && NR % 8 == 0) {  // transposed, in 8 x 8 blocks
      for (int i = 0; load && i < MR; i += 8)
        for (int j = 0; j < NR; j += 8) I::transpose8x8(c + j * ldc + i, ldc, t + i * NR + j, NR);
      tile<kRowsOfA>(kc, a, lda, b, ldb, t, NR, load, last, i0, j0, NR);
      if (last && last->sgd) return;
      for (int i = 0; i < MR; i += 8)
        for (int j = 0; j < NR; j += 8) I::transpose8x8(t + i * NR + j, NR, c + j * ldc + i, ldc);
      return;
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        t[i * NR + j] = load && i < mr && j < nr ? *at(c, ldc, transposed, i, j) : 0;
    tile<kRowsOfA>(kc, a, lda, b, ldb, t, NR, load, nullptr, 0, 0, NR);
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j) {
        float* ct = at(c, ldc, transposed, i, j);
        if (last)
          finish_at(t[i * NR + j], *last, i0 + i, j0 + j, ct);
        else
          *ct = t[i * NR + j];
      }
  }

  // An SGD epilogue reads and writes its tile's parameters and momentum: rows a whole row of
  // the layer apart, which the hardware does not fetch ahead. The next tile's rows i0.. (mr of
  // them), columns j0.. (nr), are fetched while this tile multiplies.
  static void prefetch_sgd_rows(const SgdStep& s, int i0, int mr, int j0, int nr) {
    for (int i = 0; i < mr; ++i) {
      const int64_t at = (i0 + i) * s.ld + j0;
      prefetch_for_write(s.params + at, nr);
      if (s.momentum) prefetch_for_write(s.momentum + at, nr);
    }
  }

  // Fetches the cache lines that p[0, n) lies on, to be written.
  static void prefetch_for_write(const float* p, int n) {
    constexpr uintptr_t kLine = 64;
    const uintptr_t last = reinterpret_cast<uintptr_t>(p + n - 1);
    for (uintptr_t line = reinterpret_cast<uintptr_t>(p) / kLine * kLine; line <= last;
         line += kLine)
      __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 3);
  }

  // The columns j0.. (nr of them) of the block's C: B's panel packed at pb (first, when `pack`),
  // then each tile of rows. A panel whose last vectors would hold no column goes to the tile of
  // as many vectors as it fills (the last 16 columns of the mlp's 784: half the work).
  static void panel(const Block& k, View b, float* pb, bool pack, int j0, int nr) {
    if constexpr (NV > 1) {
      if (nr <= (NV - 1) * L) return Gemm<I, MR, NV - 1>::panel(k, b, pb, pack, j0, nr);
    }
    // B's rows read in place where they hold the whole panel and lie one odd number of cache
    // lines apart (the mlp's 784 inputs: 49), so that a panel's rows spread over every set of
    // the L1 cache; else packed (a power-of-two stride would evict the panel from L1).
    const bool b_in_place = b.cs == 1 && nr == NR && b.rs % 16 == 0 && b.rs / 16 % 2 == 1;
    const float* bp = b_in_place ? b.p + k.pc * b.rs + j0 : pb;
    const int64_t ldb = b_in_place ? b.rs : NR;
    if (pack && !b_in_place) pack_b(b, k.pc, k.kc, j0, nr, pb);
    const SgdStep* sgd = k.last ? k.last->sgd : nullptr;
    for (int ir = 0; ir < k.mc; ir += MR) {
      const int mr = std::min(MR, k.mc - ir), i0 = k.ic + ir;
      if (sgd && ir + MR < k.mc)
        prefetch_sgd_rows(*sgd, i0 + MR, std::min(MR, k.mc - ir - MR), j0, nr);
      float* ct = at(k.c, k.ldc, k.transposed_c, i0, j0);
      if (!k.in_place || mr < MR)
        edge_or_tile<false>(k.kc, k.pa + ir * k.kc, MR, bp, ldb, ct, k.ldc, k.transposed_c, k.load,
                            k.last, i0, j0, mr, nr);
      else if (k.rows_of_a)
        edge_or_tile<true>(k.kc, k.a.p + i0 * k.a.rs + k.pc, k.a.rs, bp, ldb, ct, k.ldc,
                           k.transposed_c, k.load, k.last, i0, j0, mr, nr);
      else
        edge_or_tile<false>(k.kc, k.a.p + k.pc * k.a.cs + i0, k.a.cs, bp, ldb, ct, k.ldc,
                            k.transposed_c, k.load, k.last, i0, j0, mr, nr);
    }
  }

  static void run(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
                  GemmBuffers& buffers) {
    float* pa = buffers.a();
    float* pb = buffers.b();
    // A with contiguous rows or columns is read in place, except a last panel of fewer than MR
    // rows (reading on would leave A), which is packed zero-padded; other A are packed.
    const bool rows_of_a = a.cs == 1, in_place = a.cs == 1 || a.rs == 1;
    // Slices of p of equal length (a multiple of 8 except the last), at most kKc (kKcTransposed);
    // blocks of rows and columns whose packed panels fit the buffers (sized for kKc).
    const int kc_limit = e.transposed_c ? kKcTransposed : kKc;
    const int slices = (k + kc_limit - 1) / kc_limit;
    const int kc_max = std::min(k, (k / slices + 7) / 8 * 8);
    const int mc_max = std::min<int64_t>(kMc, int64_t{kMc + kMaxMr} * kKc / kc_max / MR * MR);
    const int nc_max = std::min<int64_t>(kNc, int64_t{kNc + kMaxNr} * kKc / kc_max / NR * NR);
    for (int jc = 0; jc < n; jc += nc_max) {
      const int nc = std::min(nc_max, n - jc);
      for (int pc = 0; pc < k; pc += kc_max) {
        const int kc = std::min(kc_max, k - pc);
        for (int ic = 0; ic < m; ic += mc_max) {
          const Block blk{.a = a,
                          .c = c,
                          .ldc = ldc,
                          .transposed_c = e.transposed_c,
                          .pa = pa,
                          .in_place = in_place,
                          .rows_of_a = rows_of_a,
                          .load = e.accumulate || pc > 0,
                          .last = pc + kc == k ? &e : nullptr,
                          .ic = ic,
                          .mc = std::min(mc_max, m - ic),
                          .pc = pc,
                          .kc = kc};
          for (int ir = in_place ? blk.mc / MR * MR : 0; ir < blk.mc; ir += MR)
            pack_a(a, ic + ir, std::min(MR, blk.mc - ir), pc, kc, pa + ir * kc);
          // Each B panel is packed just before its first use, while A's block waits in cache.
          for (int jr = 0; jr < nc; jr += NR)
            panel(blk, b, pb + jr * kc, ic == 0, jc + jr, std::min(NR, nc - jr));
        }
      }
    }
  }
};

// The product with I's register tile, or for a C of at most one vector's width, with I's narrow
// tile (kMrNarrow rows x 1 vector), which wastes fewer lanes (a layer of 10 outputs).
template <class I>
void gemm(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
          GemmBuffers& buffers) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty chain: 0 (or C), then the epilogue
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float* cij = Gemm<I, 1, 1>::at(c, ldc, e.transposed_c, i, j);
        Gemm<I, 1, 1>::finish_at(e.accumulate ? *cij : 0.0f, e, i, j, cij);
      }
    return;
  }
  if (n <= I::kLanes)
    Gemm<I, I::kMrNarrow, 1>::run(m, n, k, a, b, c, ldc, e, buffers);
  else
    Gemm<I, I::kMr, I::kNv>::run(m, n, k, a, b, c, ldc, e, buffers);
}

}  // namespace hippo::kernels::cpu::impl
