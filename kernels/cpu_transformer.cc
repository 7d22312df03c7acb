// CPU transformer operations: plain loops (vectorized by the compiler over channels), split over
// the pool by rows, channels or (sequence, head) pairs, never by anything that depends on the
// thread count. Attention is direct loops rather than products: at the context lengths a CPU
// trains (T <= a few hundred) a head's [T, T] products are too small for BLAS to pay, and the
// causal mask halves the work that loops do.
#include "kernels/cpu_transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace hippo::kernels::cpu {
namespace {

// Elementwise work smaller than this many values per thread is not worth a hand-off.
constexpr int64_t kGrain = 1 << 14;
constexpr float kLayerNormEps = 1e-5f;

// a[n] . b[n] in 8 interleaved partial sums added in a fixed order at the end: the compiler
// vectorizes it (it may not reorder a plain sum itself), and the bits do not depend on anything
// but n and the values.
float dot(const float* a, const float* b, int n) {
  float lane[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) +
         tail;
}

int64_t grain_rows(int64_t row_cost) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_cost));
}

}  // namespace

void add(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n) {
  pool.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep  // y may alias a or b: element i only
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
}

void embedding_forward(ThreadPool& pool, const int32_t* tokens, const float* wte, const float* wpe,
                       float* out, int B, int T, int C, int V) {
  const int64_t rows = int64_t{B} * T;
  for (int64_t r = 0; r < rows; ++r)
    if (tokens[r] < 0 || tokens[r] >= V)
      throw std::invalid_argument("token " + std::to_string(tokens[r]) + " at position " +
                                  std::to_string(r) + " is outside the vocabulary [0, " +
                                  std::to_string(V) + ")");
  pool.parallel_for(rows, grain_rows(C), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* e = wte + int64_t{tokens[r]} * C;
      const float* p = wpe + r % T * C;
      float* o = out + r * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

void embedding_backward(ThreadPool& pool, const int32_t* tokens, const float* dout, float* dwte,
                        float* dwpe, int B, int T, int C, int V) {
  const int64_t rows = int64_t{B} * T;
  // dwpe: one task per position, batch rows added in ascending order.
  pool.parallel_for(T, grain_rows(int64_t{B} * C), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* d = dwpe + t * C;
      std::fill(d, d + C, 0.0f);
      for (int b = 0; b < B; ++b) {
        const float* g = dout + (int64_t{b} * T + t) * C;
        for (int c = 0; c < C; ++c) d[c] += g[c];
      }
    }
  });
  // dwte: each task owns a range of vocabulary rows and scans every position in order, adding the
  // ones whose token it owns: a scatter without atomics, in ascending (b, t) order per row.
  pool.parallel_for(V, std::max<int64_t>(1, V / 8), [&](int64_t begin, int64_t end) {
    std::fill(dwte + begin * C, dwte + end * C, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t v = tokens[r];
      if (v < begin || v >= end) continue;
      float* d = dwte + v * C;
      const float* g = dout + r * C;
      for (int c = 0; c < C; ++c) d[c] += g[c];
    }
  });
}

void layernorm_forward(ThreadPool& pool, const float* x, const float* weight, const float* bias,
                       float* out, float* mean, float* rstd, int64_t N, int C) {
  pool.parallel_for(N, grain_rows(C), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * C;
      float sum = 0;
      for (int c = 0; c < C; ++c) sum += xr[c];
      const float m = sum / C;
      float var = 0;
      for (int c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
      const float s = 1.0f / std::sqrt(var / C + kLayerNormEps);
      float* o = out + r * C;
      for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * weight[c] + bias[c];
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

void layernorm_backward(ThreadPool& pool, const float* dout, const float* x, const float* weight,
                        const float* mean, const float* rstd, float* dx, float* dweight,
                        float* dbias, int64_t N, int C) {
  // dx: one task per row.
  pool.parallel_for(N, grain_rows(2 * C), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * C;
      const float* g = dout + r * C;
      const float m = mean[r], s = rstd[r];
      float g_mean = 0, gx_mean = 0;
      for (int c = 0; c < C; ++c) {
        const float gw = g[c] * weight[c];
        g_mean += gw;
        gx_mean += gw * ((xr[c] - m) * s);
      }
      g_mean /= C;
      gx_mean /= C;
      float* d = dx + r * C;
      for (int c = 0; c < C; ++c)
        d[c] += s * (g[c] * weight[c] - g_mean - (xr[c] - m) * s * gx_mean);
    }
  });
  // dweight, dbias: each task owns a range of channels and adds the rows in ascending order.
  pool.parallel_for(C, std::max<int64_t>(16, kGrain / std::max<int64_t>(1, N)),
                    [&](int64_t begin, int64_t end) {
                      std::fill(dweight + begin, dweight + end, 0.0f);
                      std::fill(dbias + begin, dbias + end, 0.0f);
                      for (int64_t r = 0; r < N; ++r) {
                        const float* xr = x + r * C;
                        const float* g = dout + r * C;
                        const float m = mean[r], s = rstd[r];
#pragma GCC ivdep
                        for (int64_t c = begin; c < end; ++c) {
                          dweight[c] += g[c] * ((xr[c] - m) * s);
                          dbias[c] += g[c];
                        }
                      }
                    });
}

void attention_forward(ThreadPool& pool, const float* qkv, float* out, float* att, int B, int T,
                       int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t{C};
  // One task per query row (b, h, t): its probabilities att[b, h, t, :] and its output.
  pool.parallel_for(int64_t{B} * NH * T, grain_rows(int64_t{T} * hs),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t row = begin; row < end; ++row) {
                        const int64_t t = row % T, h = row / T % NH, b = row / T / NH;
                        const float* q = qkv + (b * T + t) * C3 + h * hs;
                        const float* keys = qkv + b * T * C3 + C + h * hs;
                        const float* values = qkv + b * T * C3 + 2 * C + h * hs;
                        float* a = att + row * T;
                        float max = -INFINITY;
                        for (int64_t u = 0; u <= t; ++u) {
                          a[u] = dot(q, keys + u * C3, hs) * scale;
                          max = std::max(max, a[u]);
                        }
                        float total = 0;
                        for (int64_t u = 0; u <= t; ++u) {
                          a[u] = std::exp(a[u] - max);
                          total += a[u];
                        }
                        const float inv = 1.0f / total;
                        for (int64_t u = 0; u <= t; ++u) a[u] *= inv;
                        std::fill(a + t + 1, a + T, 0.0f);
                        float* o = out + (b * T + t) * C + h * hs;
                        std::fill(o, o + hs, 0.0f);
                        for (int64_t u = 0; u <= t; ++u) {
                          const float* v = values + u * C3;
#pragma GCC ivdep  // o and v are different parts of different buffers
                          for (int i = 0; i < hs; ++i) o[i] += a[u] * v[i];
                        }
                      }
                    });
}

void attention_backward(ThreadPool& pool, const float* dout, const float* qkv, const float* att,
                        float* scratch, float* dqkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t{C};
  // One task per (b, h): it owns that head's slices of dq, dk and dv for all positions, so the
  // sums over t into dk[u] and dv[u] need no atomics and run in ascending t.
  pool.parallel_for(int64_t{B} * NH, grain_rows(int64_t{T} * T * hs),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t bh = begin; bh < end; ++bh) {
                        const int64_t h = bh % NH, b = bh / NH;
                        const float* base = qkv + b * T * C3 + h * hs;
                        float* dbase = dqkv + b * T * C3 + h * hs;
                        for (int64_t t = 0; t < T; ++t) {  // dk and dv: sums from 0
                          std::fill_n(dbase + t * C3 + C, hs, 0.0f);
                          std::fill_n(dbase + t * C3 + 2 * C, hs, 0.0f);
                        }
                        for (int64_t t = 0; t < T; ++t) {
                          const float* a = att + (bh * T + t) * T;
                          float* ds = scratch + (bh * T + t) * T;
                          const float* g = dout + (b * T + t) * C + h * hs;
                          // ds[u] = a[u] (datt[u] - sum_u' a[u'] datt[u']), datt[u] = g . v[u]
                          float weighted = 0;
                          for (int64_t u = 0; u <= t; ++u) {
                            ds[u] = dot(g, base + u * C3 + 2 * C, hs);
                            weighted += a[u] * ds[u];
                          }
                          for (int64_t u = 0; u <= t; ++u) ds[u] = a[u] * (ds[u] - weighted);
                          const float* q = base + t * C3;
                          float* dq = dbase + t * C3;
                          std::fill(dq, dq + hs, 0.0f);
                          for (int64_t u = 0; u <= t; ++u) {
                            const float* k = base + u * C3 + C;
                            float* dk = dbase + u * C3 + C;
                            float* dv = dbase + u * C3 + 2 * C;
                            const float d = ds[u] * scale;
#pragma GCC ivdep  // dq, dk, dv: disjoint channels of dqkv (dk and dv of u <= t, dq of t)
                            for (int i = 0; i < hs; ++i) {
                              dq[i] += d * k[i];
                              dk[i] += d * q[i];
                              dv[i] += a[u] * g[i];
                            }
                          }
                        }
                      }
                    });
}

}  // namespace hippo::kernels::cpu
