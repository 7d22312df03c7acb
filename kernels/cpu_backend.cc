// The CPU backend: OpenBLAS sgemm for matrix products, simple loops (that the compiler
// vectorizes) for everything else, split over a fixed-partition thread pool.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu_transformer.h"
#include "kernels/kernels.h"
#include "kernels/parallel.h"

namespace hippo::kernels {
namespace {

// Elementwise work smaller than this many values per thread is not worth a hand-off.
constexpr int64_t kGrain = 1 << 14;

class CpuBackend final : public Backend {
 public:
  // OpenBLAS runs single-threaded: its own threading gives different bits for different thread
  // counts (it picks other kernels), so gemm splits products into blocks itself (see there).
  explicit CpuBackend(int threads) : pool_(threads) { openblas_set_num_threads(1); }

  const char* name() const override { return "cpu"; }
  int threads() const override { return pool_.threads(); }

  void* allocate(int64_t bytes) const override {
    // aligned_alloc wants a multiple of the alignment; 64 bytes is a cache line and any vector.
    const size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
  }
  void deallocate(void* p) const override { std::free(p); }
  void copy_from_host(void* dst, const void* src, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void copy(void* dst, const void* src, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void fill_zero(void* dst, int64_t bytes) const override {
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  }

  // The product is cut into blocks by its shape alone (never by the thread count), and each block
  // is one single-threaded sgemm, so the bits are the same for any number of threads:
  //   - a large output is cut into blocks of rows or columns of c;
  //   - a small output with a long k (weight gradients) is cut along k into partial products,
  //     added up in block order.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) const override {
    const double flops = 2.0 * m * n * k;
    const int64_t outputs = int64_t{m} * n;
    const int by_flops =
        static_cast<int>(std::min<double>(kGemmMaxBlocks, flops / kGemmBlockFlops));
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    // Block i of `blocks` over [0, dim), on multiples of 16 (the kernels' vector width).
    auto bounds = [](int dim, int blocks, int64_t i) {
      auto at = [&](int64_t j) {
        return j == blocks ? dim : static_cast<int>(dim * j / blocks / 16 * 16);
      };
      return std::pair{at(i), at(i + 1)};
    };

    const int k_blocks = balanced_blocks(std::min(by_flops, k / 256));
    if (outputs < kGemmBlockOutputs && k_blocks >= 2) {
      partial_.resize(static_cast<size_t>(k_blocks) * outputs);
      pool_.parallel_for(k_blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const auto [lo, hi] = bounds(k, k_blocks, i);
          cblas_sgemm(
              CblasRowMajor, ta, tb, m, n, hi - lo, 1.0f, a + (trans_a ? int64_t{lo} * m : lo), lda,
              b + (trans_b ? lo : int64_t{lo} * n), ldb, 0.0f, partial_.data() + i * outputs, n);
        }
      });
      pool_.parallel_for(outputs, kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          float sum = 0;
          for (int i = 0; i < k_blocks; ++i) sum += partial_[i * outputs + j];
          c[j] = alpha * sum + (beta == 0 ? 0.0f : beta * c[j]);
        }
      });
      return;
    }

    const bool split_n = n >= m;
    const int dim = split_n ? n : m;
    const int blocks = balanced_blocks(
        static_cast<int>(std::min<int64_t>({by_flops, outputs / kGemmBlockOutputs, dim / 16})));
    pool_.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const auto [lo, hi] = bounds(dim, blocks, i);
        if (split_n)
          cblas_sgemm(CblasRowMajor, ta, tb, m, hi - lo, k, alpha, a, lda,
                      b + (trans_b ? int64_t{lo} * k : lo), ldb, beta, c + lo, n);
        else
          cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, n, k, alpha,
                      a + (trans_a ? lo : int64_t{lo} * k), lda, b, ldb, beta, c + int64_t{lo} * n,
                      n);
      }
    });
  }

  void bias_forward(float* y, const float* bias, int64_t outer, int64_t channels,
                    int64_t inner) const override {
    if (inner == 1) {  // y[outer, channels]: one task per row, vectorized over channels
      pool_.parallel_for(outer, std::max<int64_t>(1, kGrain / channels),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t o = begin; o < end; ++o) {
                             float* row = y + o * channels;
#pragma GCC ivdep
                             for (int64_t c = 0; c < channels; ++c) row[c] += bias[c];
                           }
                         });
      return;
    }
    // One task per (outer, channel) row of `inner` values.
    pool_.parallel_for(outer * channels, std::max<int64_t>(1, kGrain / inner),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           float* row = y + r * inner;
                           const float b = bias[r % channels];
                           for (int64_t i = 0; i < inner; ++i) row[i] += b;
                         }
                       });
  }

  // Each dbias[c] is summed over outer, then inner, in increasing order, whatever the partition.
  void bias_backward(const float* dy, float* dbias, int64_t outer, int64_t channels,
                     int64_t inner) const override {
    if (inner == 1) {  // dy[outer, channels]: tasks own ranges of channels, vectorized over them
      pool_.parallel_for(channels, std::max<int64_t>(16, kGrain / outer),
                         [&](int64_t begin, int64_t end) {
                           std::fill(dbias + begin, dbias + end, 0.0f);
                           for (int64_t o = 0; o < outer; ++o) {
                             const float* row = dy + o * channels;
#pragma GCC ivdep
                             for (int64_t c = begin; c < end; ++c) dbias[c] += row[c];
                           }
                         });
      return;
    }
    pool_.parallel_for(channels, std::max<int64_t>(1, kGrain / (outer * inner)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t c = begin; c < end; ++c) {
                           float total = 0;
                           for (int64_t o = 0; o < outer; ++o) {
                             const float* row = dy + (o * channels + c) * inner;
                             float s = 0;
                             for (int64_t i = 0; i < inner; ++i) s += row[i];
                             total += s;
                           }
                           dbias[c] = total;
                         }
                       });
  }

  void relu_forward(const float* x, float* y, int64_t n) const override {
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep  // in place (y == x, dx == dy) is fine: element i only
      for (int64_t i = begin; i < end; ++i) {
        const float v = x[i];
        y[i] = v > 0 ? v : 0.0f;
      }
    });
  }

  void relu_backward(const float* y, const float* dy, float* dx, int64_t n) const override {
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep  // in place (y == x, dx == dy) is fine: element i only
      for (int64_t i = begin; i < end; ++i) {
        const float g = dy[i];  // loaded unconditionally, so the select vectorizes
        dx[i] = y[i] > 0 ? g : 0.0f;
      }
    });
  }

  void gelu_forward(const float* x, float* y, int64_t n) const override {
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanh_rational(kGeluC * (v + 0.044715f * v * v * v)));
      }
    });
  }

  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) const override {
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = x[i];
        const float t = tanh_rational(kGeluC * (v + 0.044715f * v * v * v));
        const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
      }
    });
  }

  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                      float* col, float* y) const override {
    im2col(s, x, col);
    const int64_t n = s.col_cols();
    gemm(false, false, s.out_channels, static_cast<int>(n), static_cast<int>(s.col_rows()), 1.0f, w,
         col, 0.0f, y);
    if (bias) bias_forward(y, bias, 1, s.out_channels, n);
  }

  // x is not read: col holds forward's im2col of it.
  void conv2d_backward(const ConvShape& s, const float*, const float* col, const float* w,
                       const float* dy, float* dcol, float* dx, float* dw,
                       float* dbias) const override {
    const int n = static_cast<int>(s.col_cols());
    const int rows = static_cast<int>(s.col_rows());
    if (dbias) bias_backward(dy, dbias, 1, s.out_channels, n);
    // dw[Cout, rows] = dy[Cout, n] x col[rows, n]^T
    gemm(false, true, s.out_channels, rows, n, 1.0f, dy, col, 0.0f, dw);
    if (dx == nullptr) return;
    // dcol[rows, n] = w[Cout, rows]^T x dy[Cout, n]
    gemm(true, false, rows, n, s.out_channels, 1.0f, w, dy, 0.0f, dcol);
    col2im(s, dcol, dx);
  }

  void maxpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                       int k) const override {
    const int ho = h / k, wo = w / k;
    pool_.parallel_for(planes * ho, grain_planes(int64_t{k} * w), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {  // output row r = (plane, oy)
        const float* in = x + (r / ho * h + r % ho * k) * w;
        float* out = y + r * wo;
        if (k == 2) {
          for (int ox = 0; ox < wo; ++ox)
            out[ox] = std::max(std::max(in[2 * ox], in[2 * ox + 1]),
                               std::max(in[w + 2 * ox], in[w + 2 * ox + 1]));
          continue;
        }
        for (int ox = 0; ox < wo; ++ox) out[ox] = in[window_argmax(in, w, k, ox)];
      }
    });
  }

  void maxpool_backward(const float* x, const float* dy, float* dx, int64_t planes, int h, int w,
                        int k) const override {
    const int ho = h / k, wo = w / k;
    pool_.parallel_for(planes, grain_planes(int64_t{h} * w), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float* xp = x + p * h * w;
        float* dxp = dx + p * h * w;
        if (k != 2 || ho * k != h || wo * k != w) std::memset(dxp, 0, sizeof(float) * h * w);
        for (int oy = 0; oy < ho; ++oy) {
          const float* in = xp + oy * k * w;
          float* din = dxp + oy * k * w;
          const float* g = dy + (p * ho + oy) * wo;
          if (k == 2 && wo * k == w) {
            // Writes all four gradients of each window, so no memset first.
            for (int ox = 0; ox < wo; ++ox) {
              const float a = in[2 * ox], b = in[2 * ox + 1], c = in[w + 2 * ox],
                          d = in[w + 2 * ox + 1];
              const float m = std::max(std::max(a, b), std::max(c, d));
              // The gradient not yet routed, passed on until the first maximum takes it
              // (selects, not branches: the maximum's position is unpredictable).
              const float ga = g[ox], gb = a == m ? 0.0f : ga, gc = b == m ? 0.0f : gb,
                          gd = c == m ? 0.0f : gc;
              din[2 * ox] = a == m ? ga : 0.0f;
              din[2 * ox + 1] = b == m ? gb : 0.0f;
              din[w + 2 * ox] = c == m ? gc : 0.0f;
              din[w + 2 * ox + 1] = gd;
            }
            continue;
          }
          for (int ox = 0; ox < wo; ++ox) {
            const int at = window_argmax(in, w, k, ox);
            din[at] = g[ox];
          }
        }
      }
    });
  }

  void avgpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                       int k) const override {
    const int ho = h / k, wo = w / k;
    const float scale = 1.0f / static_cast<float>(k * k);
    pool_.parallel_for(planes, grain_planes(h * w), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const float* xp = x + p * h * w;
        for (int oy = 0; oy < ho; ++oy)
          for (int ox = 0; ox < wo; ++ox) {
            float s = 0;
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) s += xp[(oy * k + i) * w + ox * k + j];
            y[p * ho * wo + oy * wo + ox] = s * scale;
          }
      }
    });
  }

  void avgpool_backward(const float* dy, float* dx, int64_t planes, int h, int w,
                        int k) const override {
    const int ho = h / k, wo = w / k;
    const float scale = 1.0f / static_cast<float>(k * k);
    pool_.parallel_for(planes, grain_planes(h * w), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        float* dxp = dx + p * h * w;
        std::memset(dxp, 0, sizeof(float) * h * w);
        for (int oy = 0; oy < ho; ++oy)
          for (int ox = 0; ox < wo; ++ox) {
            const float g = dy[p * ho * wo + oy * wo + ox] * scale;
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) dxp[(oy * k + i) * w + ox * k + j] = g;
          }
      }
    });
  }

  void softmax_cross_entropy(const float* logits, const int32_t* labels, int batch, int classes,
                             float* losses, float* dlogits, float grad_scale) const override {
    check_labels(labels, batch, classes);
    pool_.parallel_for(batch, grain_planes(classes), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* z = logits + r * classes;
        const float m = *std::max_element(z, z + classes);
        float total = 0;
        for (int j = 0; j < classes; ++j) total += std::exp(z[j] - m);
        losses[r] = std::log(total) - (z[labels[r]] - m);
        if (dlogits == nullptr) continue;
        float* d = dlogits + r * classes;
        for (int j = 0; j < classes; ++j) d[j] = grad_scale * (std::exp(z[j] - m) / total);
        d[labels[r]] -= grad_scale;
      }
    });
  }

  int64_t count_correct(const float* logits, const int32_t* labels, int batch,
                        int classes) const override {
    check_labels(labels, batch, classes);
    int64_t correct = 0;
    for (int r = 0; r < batch; ++r) {
      const float* z = logits + int64_t{r} * classes;
      correct += (std::max_element(z, z + classes) - z) == labels[r];
    }
    return correct;
  }

  double sum(const float* x, int64_t n) const override {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }

  void swap_outer_axes(const float* x, float* y, int64_t a, int64_t b,
                       int64_t inner) const override {
    pool_.parallel_for(
        b, std::max<int64_t>(1, kGrain / (a * inner)), [&](int64_t begin, int64_t end) {
          for (int64_t j = begin; j < end; ++j)
            for (int64_t i = 0; i < a; ++i)
              std::memcpy(y + (j * a + i) * inner, x + (i * b + j) * inner, sizeof(float) * inner);
        });
  }

  void sgd_update(float* p, const float* g, float* buf, int64_t n,
                  const SgdParams& hp) const override {
    if (hp.momentum != 0 && buf == nullptr)
      throw std::invalid_argument("sgd_update: momentum needs a buffer");
    const float lr = hp.lr, mu = hp.momentum, wd = hp.weight_decay;
    // One loop per variant, so that each is a straight vectorized loop.
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      if (mu == 0) {
#pragma GCC ivdep
        for (int64_t i = begin; i < end; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      } else if (hp.nesterov) {
#pragma GCC ivdep
        for (int64_t i = begin; i < end; ++i) {
          const float d = g[i] + wd * p[i];
          buf[i] = mu * buf[i] + d;
          p[i] -= lr * (d + mu * buf[i]);
        }
      } else {
#pragma GCC ivdep
        for (int64_t i = begin; i < end; ++i) {
          buf[i] = mu * buf[i] + (g[i] + wd * p[i]);
          p[i] -= lr * buf[i];
        }
      }
    });
  }

  void adam_update(float* p, const float* g, float* m, float* v, int64_t n,
                   const AdamParams& hp) const override {
    if (hp.t < 1) throw std::invalid_argument("adam_update: t must be >= 1");
    const float bc1 = 1.0f - static_cast<float>(std::pow(double{hp.beta1}, double(hp.t)));
    const float bc2 = 1.0f - static_cast<float>(std::pow(double{hp.beta2}, double(hp.t)));
    const float step = hp.lr / bc1;
    const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma GCC ivdep
      for (int64_t i = begin; i < end; ++i) {
        float grad = g[i];
        if (hp.decoupled)
          p[i] -= hp.lr * hp.weight_decay * p[i];
        else
          grad += hp.weight_decay * p[i];
        m[i] = hp.beta1 * m[i] + (1.0f - hp.beta1) * grad;
        v[i] = hp.beta2 * v[i] + (1.0f - hp.beta2) * grad * grad;
        p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + hp.eps);
      }
    });
  }

  // The transformer operations live in cpu_transformer.cc.
  void add(const float* a, const float* b, float* y, int64_t n) const override {
    cpu::add(pool_, a, b, y, n);
  }
  void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                         int B, int T, int C, int V) const override {
    cpu::embedding_forward(pool_, tokens, wte, wpe, out, B, T, C, V);
  }
  void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B,
                          int T, int C, int V) const override {
    cpu::embedding_backward(pool_, tokens, dout, dwte, dwpe, B, T, C, V);
  }
  void layernorm_forward(const float* x, const float* weight, const float* bias, float* out,
                         float* mean, float* rstd, int64_t N, int C) const override {
    cpu::layernorm_forward(pool_, x, weight, bias, out, mean, rstd, N, C);
  }
  void layernorm_backward(const float* dout, const float* x, const float* weight, const float* mean,
                          const float* rstd, float* dx, float* dweight, float* dbias, int64_t N,
                          int C) const override {
    cpu::layernorm_backward(pool_, dout, x, weight, mean, rstd, dx, dweight, dbias, N, C);
  }
  void attention_forward(const float* qkv, float* out, float* att, int B, int T, int C,
                         int NH) const override {
    cpu::attention_forward(pool_, qkv, out, att, B, T, C, NH);
  }
  void attention_backward(const float* dout, const float* qkv, const float* att, float* scratch,
                          float* dqkv, int B, int T, int C, int NH) const override {
    cpu::attention_backward(pool_, dout, qkv, att, scratch, dqkv, B, T, C, NH);
  }

 private:
  // A product is split into blocks of at least this many flops, at most kGemmMaxBlocks; along m
  // or n only when its output has kGemmBlockOutputs values per block (smaller outputs are split
  // along k, or not at all: cutting them repacks the operands once per block).
  static constexpr double kGemmBlockFlops = 8e6;
  static constexpr int kGemmMaxBlocks = 8;
  static constexpr int64_t kGemmBlockOutputs = 1 << 16;
  static constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

  // tanh as a rational function (Eigen's fast float tanh: odd degree-13 over even degree-6
  // polynomial, clamped at +-7.9), within 4e-7 of tanh (relative, near 0 too). Plain arithmetic
  // without branches, so GELU's loops vectorize; libm's tanhf made GELU 40% of a gpt's step.
  static float tanh_rational(float v) {
    constexpr float kClamp = 7.90531110763549805f;
    const float x = std::min(std::max(v, -kClamp), kClamp), x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = x2 * p + 2.00018790482477e-13f;
    p = x2 * p - 8.60467152213735e-11f;
    p = x2 * p + 5.12229709037114e-08f;
    p = x2 * p + 1.48572235717979e-05f;
    p = x2 * p + 6.37261928875436e-04f;
    p = x2 * p + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = x2 * q + 1.18534705686654e-04f;
    q = x2 * q + 2.26843463243900e-03f;
    q = x2 * q + 4.89352518554385e-03f;
    return x * p / q;
  }

  // Offset, from the window row's start `in`, of the first maximum (row-major) of window ox of a
  // k x k pooling over rows of width w.
  static int window_argmax(const float* in, int w, int k, int ox) {
    int at = ox * k;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j)
        if (in[i * w + ox * k + j] > in[at]) at = i * w + ox * k + j;
    return at;
  }

  // The largest power of two <= blocks (1 if blocks < 1): a product cut into 2^j blocks keeps 2,
  // 4 or 8 threads equally busy, where 3 blocks on 2 threads would leave one idle for a third.
  static int balanced_blocks(int blocks) {
    int p = 1;
    while (2 * p <= blocks) p *= 2;
    return p;
  }

  static int64_t grain_planes(int64_t plane_size) {
    return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, plane_size));
  }

  static void check_labels(const int32_t* labels, int batch, int classes) {
    for (int r = 0; r < batch; ++r)
      if (labels[r] < 0 || labels[r] >= classes)
        throw std::invalid_argument("label " + std::to_string(labels[r]) + " of row " +
                                    std::to_string(r) + " is outside [0, " +
                                    std::to_string(classes) + ")");
  }

  // col[(c, ki, kj), (b, oy, ox)] = x[c, b, oy + ki - pad, ox + kj - pad], 0 outside the image.
  void im2col(const ConvShape& s, const float* x, float* col) const {
    const int h = s.height, w = s.width, k = s.kernel, ho = s.out_height(), wo = s.out_width();
    const int64_t cols = s.col_cols();
    pool_.parallel_for(s.col_rows(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int c = static_cast<int>(r / (k * k)), ki = static_cast<int>(r / k % k),
                  kj = static_cast<int>(r % k);
        float* out = col + r * cols;
        for (int b = 0; b < s.batch; ++b) {
          const float* plane = x + (int64_t{c} * s.batch + b) * h * w;
          for (int oy = 0; oy < ho; ++oy, out += wo) {
            const int iy = oy + ki - s.pad;
            if (iy < 0 || iy >= h) {
              std::fill(out, out + wo, 0.0f);
              continue;
            }
            const float* in = plane + int64_t{iy} * w;
            // ox in [lo, hi) reads inside the row; outside it the padding is zero.
            const int lo = std::clamp(s.pad - kj, 0, wo), hi = std::clamp(w + s.pad - kj, lo, wo);
            std::fill(out, out + lo, 0.0f);
            std::memcpy(out + lo, in + lo + kj - s.pad, sizeof(float) * (hi - lo));
            std::fill(out + hi, out + wo, 0.0f);
          }
        }
      }
    });
  }

  // dx[c, b, y, x] = sum over (ki, kj) of dcol[(c, ki, kj), (b, y - ki + pad, x - kj + pad)],
  // one input channel per task, kernel offsets added in a fixed order.
  void col2im(const ConvShape& s, const float* dcol, float* dx) const {
    const int h = s.height, w = s.width, k = s.kernel, ho = s.out_height(), wo = s.out_width();
    const int64_t cols = s.col_cols();
    pool_.parallel_for(s.in_channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        float* dplanes = dx + c * s.batch * h * w;
        std::memset(dplanes, 0, sizeof(float) * s.batch * h * w);
        for (int ki = 0; ki < k; ++ki)
          for (int kj = 0; kj < k; ++kj) {
            const float* in = dcol + ((c * k + ki) * k + kj) * cols;
            const int lo = std::clamp(s.pad - kj, 0, wo), hi = std::clamp(w + s.pad - kj, lo, wo);
            for (int b = 0; b < s.batch; ++b)
              for (int oy = 0; oy < ho; ++oy) {
                const int iy = oy + ki - s.pad;
                if (iy < 0 || iy >= h) continue;
                const float* src = in + (int64_t{b} * ho + oy) * wo;
                float* dst = dplanes + (int64_t{b} * h + iy) * w + kj - s.pad;
                for (int ox = lo; ox < hi; ++ox) dst[ox] += src[ox];
              }
          }
      }
    });
  }

  mutable ThreadPool pool_;
  mutable std::vector<float> partial_;  // gemm's partial products when it splits k
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace hippo::kernels
