// The CPU backend: hippo's own matrix products (cpu_gemm.h: AVX-512, AVX2 or portable kernels,
// picked from the CPU's features), convolutions as products over image chunks, and simple loops
// (that the compiler vectorizes) for everything else, split over a fixed-partition thread pool.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu_conv.h"
#include "kernels/cpu_gemm.h"
#include "kernels/cpu_optimizer.h"
#include "kernels/cpu_transformer.h"
#include "kernels/kernels.h"
#include "kernels/parallel.h"

namespace hippo::kernels {
namespace {

// Elementwise work smaller than this many values per thread is not worth a hand-off.
constexpr int64_t kGrain = 1 << 14;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, cpu::Isa isa)
      : isa_(isa), pool_(threads), work_(threads), accumulators_(threads), unpooled_(threads) {
    for (int t = 0; t < threads; ++t) gemm_buffers_.push_back(std::make_unique<cpu::GemmBuffers>());
  }

  const char* name() const override { return "cpu"; }
  int threads() const override { return pool_.threads(); }
  void set_threads(int threads) const override {
    pool_.resize(threads);
    const size_t n = static_cast<size_t>(threads);
    while (gemm_buffers_.size() < n) gemm_buffers_.push_back(std::make_unique<cpu::GemmBuffers>());
    for (auto* per_thread : {&work_, &accumulators_, &unpooled_})
      if (per_thread->size() < n) per_thread->resize(n);
  }

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
  void* host_address(void* p) const override { return p; }
  void fill_zero(void* dst, int64_t bytes) const override {
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  }

  // Every value of c is one chain of fused multiply-adds over k (cpu_gemm.h), whichever thread
  // computes it: the bits do not depend on the thread count. alpha = 1, beta = 0 (every call of
  // the engine) writes the chain; otherwise c = alpha * chain + beta * c.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) const override {
    const cpu::View va = trans_a ? cpu::View{a, 1, m} : cpu::View{a, k, 1};
    const cpu::View vb = trans_b ? cpu::View{b, 1, k} : cpu::View{b, n, 1};
    if (alpha == 1 && beta == 0) {
      product(m, n, k, va, vb, c, n, {});
      return;
    }
    scaled_.resize(static_cast<size_t>(m) * n);
    product(m, n, k, va, vb, scaled_.data(), n, {});
    for (int64_t i = 0; i < int64_t{m} * n; ++i)
      c[i] = alpha * scaled_[i] + (beta == 0 ? 0.0f : beta * c[i]);
  }

  // y[rows, out] = x[rows, in] w[out, in]^T + bias, then ReLU: the bias and ReLU are applied to
  // each tile of y while it is in registers. With more outputs than rows (the mlp's first layer:
  // 256 x 784 weights, 128 x 784 inputs), as y^T = w x^T stored transposed: the product then packs
  // (transposes) the smaller x instead of w, and reads w in place; each value is the same chain
  // (a fused multiply-add's product is commutative).
  void linear_forward(const float* x, const float* w, const float* bias, float* y, int rows, int in,
                      int out, bool relu) const override {
    if (out > rows)
      product(out, rows, in, cpu::View{w, in, 1}, cpu::View{x, 1, in}, y, out,
              {.row_bias = bias, .relu = relu, .transposed_c = true});
    else
      product(rows, out, in, cpu::View{x, in, 1}, cpu::View{w, 1, in}, y, out,
              {.col_bias = bias, .relu = relu});
  }

  // The step is taken on each tile of dw while it is in registers: dw is never stored.
  void linear_weight_sgd(const float* dy, const float* x, float* dw, float* w, float* momentum,
                         int rows, int in, int out, const SgdParams& hp) const override {
    if (hp.momentum != 0 && momentum == nullptr)
      throw std::invalid_argument("linear_weight_sgd: momentum needs a buffer");
    const cpu::SgdStep step{.params = w, .momentum = momentum, .ld = in, .hp = hp};
    product(out, in, rows, cpu::View{dy, 1, out}, cpu::View{x, in, 1}, dw, in, {.sgd = &step});
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

  // relu_backward and bias_backward in one pass over dy, with bias_backward's order of sums.
  void bias_relu_backward(const float* y, float* dy, float* dbias, int64_t outer, int64_t channels,
                          int64_t inner) const override {
    if (!y) return bias_backward(dy, dbias, outer, channels, inner);
    if (inner == 1) {
      pool_.parallel_for(channels, std::max<int64_t>(16, kGrain / outer),
                         [&](int64_t begin, int64_t end) {
                           std::fill(dbias + begin, dbias + end, 0.0f);
                           for (int64_t o = 0; o < outer; ++o) {
                             const float* yr = y + o * channels;
                             float* row = dy + o * channels;
#pragma GCC ivdep
                             for (int64_t c = begin; c < end; ++c) {
                               const float g = yr[c] > 0 ? row[c] : 0.0f;
                               row[c] = g;
                               dbias[c] += g;
                             }
                           }
                         });
      return;
    }
    pool_.parallel_for(channels, std::max<int64_t>(1, kGrain / (outer * inner)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t c = begin; c < end; ++c) {
                           float total = 0;
                           for (int64_t o = 0; o < outer; ++o) {
                             const float* yr = y + (o * channels + c) * inner;
                             float* row = dy + (o * channels + c) * inner;
                             float s = 0;
                             for (int64_t i = 0; i < inner; ++i) {
                               const float g = yr[i] > 0 ? row[i] : 0.0f;
                               row[i] = g;
                               s += g;
                             }
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

  // Direct convolutions (cpu_conv.h): no column matrix, no scratch in the caller's memory.
  int64_t conv2d_scratch_size(const ConvShape&) const override {
    return 0;
  }

  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float*,
                      float* y) const override {
    convolve(s, x, pack(s, w), bias, y);
  }

  void conv2d_backward(const ConvShape& s, const float* x, const float*, const float* w,
                       const float* dy, float*, float* dx, float* dw, float* dbias) const override {
    if (dbias) bias_backward(dy, dbias, 1, s.out_channels, s.col_cols());
    convolution_gradients(
        s, x, w,
        [&](int, int b0, int) {
          return cpu::Chunk<const float>{dy, s.batch, b0};
        },
        dx, dw);
  }

  // The cnn's block fused (cpu::conv_pool_forward): the convolution's output is pooled from the
  // kernels' staged planes and never stored; the scratch keeps one byte per pooled output, the
  // position of its window's first maximum. The backward unpools the output gradient into each
  // chunk of images as the kernels need it (in cache) instead of the whole batch (in memory).
  int64_t conv_block_scratch_size(const ConvShape& s) const override {
    return (pooled_size(s) + 3) / 4;
  }

  void conv_block_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                          float* scratch, float* y) const override {
    const float* packed = pack(s, w);
    uint8_t* codes = reinterpret_cast<uint8_t*>(scratch);
    const int per = chunk_images(s), chunks = (s.batch + per - 1) / per;
    for_each_part(chunks, [&](int t, int first, int last) {
      float* buffer = work(t, cpu::conv_work_size(s, per));
      for (int b0 = first * per; b0 < std::min(last * per, s.batch); b0 += per)
        cpu::conv_pool_forward(isa_, s, {x, s.batch, b0}, packed, bias, {y, s.batch, b0},
                               {codes, s.batch, b0}, std::min(per, s.batch - b0), buffer);
    });
  }

  void conv_block_backward(const ConvShape& s, const float* x, const float* w, const float* y,
                           float* dy, float* scratch, float* dx, float* dw,
                           float* dbias) const override {
    bias_relu_backward(y, dy, dbias, 1, s.out_channels, pooled_size(s) / s.out_channels);
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(scratch);
    convolution_gradients(
        s, x, w,
        [&](int t, int b0, int nb) {
          std::vector<float>& dz = unpooled_[t];
          dz.resize(
              static_cast<size_t>(int64_t{s.out_channels} * nb * s.out_height() * s.out_width()));
          unpool(s, dy, codes, b0, nb, dz.data());
          return cpu::Chunk<const float>{dz.data(), nb, 0};
        },
        dx, dw);
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
        // Each exponential once: kept in dlogits' row (when there is one) for the gradient.
        float* e = dlogits ? dlogits + r * classes : nullptr;
        float total = 0;
        for (int j = 0; j < classes; ++j) {
          const float v = std::exp(z[j] - m);
          if (e) e[j] = v;
          total += v;
        }
        losses[r] = std::log(total) - (z[labels[r]] - m);
        if (e == nullptr) continue;
        for (int j = 0; j < classes; ++j) e[j] = grad_scale * (e[j] / total);
        e[labels[r]] -= grad_scale;
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
    pool_.parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      cpu::sgd_update(isa_, p + begin, g + begin, buf ? buf + begin : nullptr, end - begin, hp);
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
      cpu::adam_update(isa_, p + begin, g + begin, m + begin, v + begin, end - begin, hp, step,
                       inv_sqrt_bc2);
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
  // A product is cut into parts for the threads only where each part has this much work.
  static constexpr double kPartFlops = 4e6;
  // A convolution works on chunks of images of about this many floats (256 KB: L2 keeps them).
  static constexpr int64_t kChunkFloats = 1 << 16;
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

  // Runs fn(t, first, last) on pool thread t for each t < min(items, threads()), with
  // [first, last) the thread's contiguous share of [0, items).
  template <typename Fn>
  void for_each_part(int items, const Fn& fn) const {
    const int parts = std::min(items, threads());
    pool_.parallel_for(parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        fn(static_cast<int>(t), static_cast<int>(items * t / parts),
           static_cast<int>(items * (t + 1) / parts));
    });
  }

  // Bound t of `parts` ranges over [0, span), on multiples of unit (except span itself).
  static int part_bound(int span, int parts, int unit, int t) {
    return t == parts ? span : span * t / parts / unit * unit;
  }

  // c[m, n] (rows ldc apart) = epilogue(a b), cut into parts for the threads: ranges of columns
  // when n >= m (each part packs all of A, the smaller operand), else of rows.
  void product(int m, int n, int k, cpu::View a, cpu::View b, float* c, int64_t ldc,
               const cpu::Epilogue& e) const {
    const bool by_cols = n >= m;
    const int span = by_cols ? n : m, unit = by_cols ? 32 : 8;
    const int parts = static_cast<int>(std::clamp<double>(
        std::min<double>(2.0 * m * n * k / kPartFlops, span / unit), 1, threads()));
    for_each_part(parts, [&](int t, int, int) {
      const int lo = part_bound(span, parts, unit, t), hi = part_bound(span, parts, unit, t + 1);
      cpu::Epilogue part = e;
      cpu::SgdStep step;  // e.sgd's at the part's first value
      if (e.sgd) {
        const int64_t first = by_cols ? lo : lo * e.sgd->ld;
        step = *e.sgd;
        step.params += first;
        if (step.momentum) step.momentum += first;
        part.sgd = &step;
      }
      // The part's first value of C: column lo (stored transposed: row lo), or row lo.
      const int64_t first_c = by_cols != e.transposed_c ? lo : lo * ldc;
      if (by_cols) {
        if (part.col_bias) part.col_bias += lo;
        cpu::gemm(isa_, m, hi - lo, k, a, cpu::View{b.p + lo * b.cs, b.rs, b.cs}, c + first_c, ldc,
                  part, *gemm_buffers_[t]);
      } else {
        if (part.row_bias) part.row_bias += lo;
        cpu::gemm(isa_, hi - lo, n, k, cpu::View{a.p + lo * a.rs, a.rs, a.cs}, b, c + first_c, ldc,
                  part, *gemm_buffers_[t]);
      }
    });
  }

  // Thread t's work buffer, at least n floats (grown only by a larger convolution).
  float* work(int t, int64_t n) const {
    std::vector<float>& w = work_[t];
    if (static_cast<int64_t>(w.size()) < n) w.resize(static_cast<size_t>(n));
    return w.data();
  }

  // Images per chunk of a convolution: its padded input and its output gradient (transposed for
  // the weight gradient) near kChunkFloats.
  static int chunk_images(const ConvShape& s) {
    const int64_t per_image =
        int64_t{s.in_channels} * (s.height + 2 * s.pad) * (s.width + 2 * s.pad) +
        cpu::conv_acc_width(s) * s.out_height() * s.out_width();
    return static_cast<int>(std::clamp<int64_t>(kChunkFloats / per_image, 1, s.batch));
  }

  // w packed for the kernels (into a buffer of the backend's).
  const float* pack(const ConvShape& s, const float* w) const {
    packed_.resize(static_cast<size_t>(cpu::conv_packed_weights_size(s)));
    cpu::conv_pack_weights(isa_, s, w, packed_.data());
    return packed_.data();
  }

  // y = the convolution of x with the packed weights (+ bias), chunks of images spread over the
  // threads.
  void convolve(const ConvShape& s, const float* x, const float* packed, const float* bias,
                float* y) const {
    const int per = chunk_images(s), chunks = (s.batch + per - 1) / per;
    for_each_part(chunks, [&](int t, int first, int last) {
      float* buffer = work(t, cpu::conv_work_size(s, per));
      for (int b0 = first * per; b0 < std::min(last * per, s.batch); b0 += per)
        cpu::conv_forward(isa_, s, {x, s.batch, b0}, packed, bias, {y, s.batch, b0},
                          std::min(per, s.batch - b0), buffer);
    });
  }

  // The gradients of the convolution s with input x and weights w, from its output gradient:
  // dy_chunk(t, b0, nb) gives images [b0, b0 + nb) of it as a chunk (thread t may build it in a
  // buffer of its own). dw: the threads split the weights by input channels; each sums its rows
  // over the chunks of images in order (cpu::conv_weight_grad: one chain per weight over the
  // positions, whatever the split). dx, unless null: the transposed convolution, a forward one of
  // the output gradient with the kernel flipped and the channels swapped (its own chains, over
  // (co, ki, kj)), chunks of images spread over the threads.
  template <typename DyChunk>
  void convolution_gradients(const ConvShape& s, const float* x, const float* w,
                             const DyChunk& dy_chunk, float* dx, float* dw) const {
    const int taps = s.kernel * s.kernel, per = chunk_images(s);
    const int64_t rows = s.col_rows(), width = cpu::conv_acc_width(s);
    const int parts = std::clamp(s.in_channels, 1, threads());
    for_each_part(parts, [&](int t, int, int) {
      const int r0 = s.in_channels * t / parts * taps, r1 = s.in_channels * (t + 1) / parts * taps;
      std::vector<float>& acc = accumulators_[t];
      acc.assign(static_cast<size_t>((r1 - r0 + cpu::kConvAccSlackRows) * width), 0.0f);
      float* buffer = work(t, cpu::conv_work_size(s, per));
      for (int b0 = 0; b0 < s.batch; b0 += per) {
        const int nb = std::min(per, s.batch - b0);
        cpu::conv_weight_grad(isa_, s, {x, s.batch, b0}, dy_chunk(t, b0, nb), acc.data(), r0, r1,
                              nb, buffer);
      }
      for (int r = r0; r < r1; ++r)
        for (int co = 0; co < s.out_channels; ++co) dw[co * rows + r] = acc[(r - r0) * width + co];
    });
    if (dx == nullptr) return;
    const ConvShape t{.batch = s.batch,
                      .in_channels = s.out_channels,
                      .out_channels = s.in_channels,
                      .height = s.out_height(),
                      .width = s.out_width(),
                      .kernel = s.kernel,
                      .pad = s.kernel - 1 - s.pad};
    // flipped[ci, (co, ki, kj)] = w[co, (ci, k-1-ki, k-1-kj)]
    const int k = s.kernel;
    flipped_.resize(static_cast<size_t>(t.col_rows() * t.out_channels));
    for (int ci = 0; ci < s.in_channels; ++ci)
      for (int co = 0; co < s.out_channels; ++co)
        for (int ki = 0; ki < k; ++ki)
          for (int kj = 0; kj < k; ++kj)
            flipped_[ci * t.col_rows() + (co * k + ki) * k + kj] =
                w[co * rows + (ci * k + k - 1 - ki) * k + k - 1 - kj];
    const float* packed = pack(t, flipped_.data());
    const int per_t = chunk_images(t), chunks = (s.batch + per_t - 1) / per_t;
    for_each_part(chunks, [&](int th, int first, int last) {
      float* buffer = work(th, cpu::conv_work_size(t, per_t));
      for (int b0 = first * per_t; b0 < std::min(last * per_t, s.batch); b0 += per_t) {
        const int nb = std::min(per_t, s.batch - b0);
        cpu::conv_forward(isa_, t, dy_chunk(th, b0, nb), packed, nullptr, {dx, s.batch, b0}, nb,
                          buffer);
      }
    });
  }

  // Outputs of the cnn block's pooling (2 x 2, stride 2) of the convolution s: Cout x B x windows.
  static int64_t pooled_size(const ConvShape& s) {
    return int64_t{s.out_channels} * s.batch * (s.out_height() / 2) * (s.out_width() / 2);
  }

  // dz[co, b] for the nb images of a chunk (CNHW, batch nb) from the pooled output gradient
  // dy[co, b0 + b] and the first-maximum codes: each window's gradient at its first maximum, 0
  // elsewhere (and on a last odd row or column): maxpool_backward's routing.
  static void unpool(const ConvShape& s, const float* dy, const uint8_t* codes, int b0, int nb,
                     float* dz) {
    const int ho = s.out_height(), wo = s.out_width(), hq = ho / 2, wq = wo / 2;
    for (int co = 0; co < s.out_channels; ++co)
      for (int b = 0; b < nb; ++b) {
        float* plane = dz + (int64_t{co} * nb + b) * ho * wo;
        std::fill(plane, plane + ho * wo, 0.0f);
        const int64_t pooled = (int64_t{co} * s.batch + b0 + b) * hq * wq;
        for (int py = 0; py < hq; ++py)
          for (int px = 0; px < wq; ++px) {
            const int q = py * wq + px, code = codes[pooled + q];
            plane[(2 * py + code / 2) * wo + 2 * px + code % 2] = dy[pooled + q];
          }
      }
  }

  cpu::Isa isa_;
  mutable ThreadPool pool_;
  mutable std::vector<std::unique_ptr<cpu::GemmBuffers>> gemm_buffers_;  // one per thread
  mutable std::vector<std::vector<float>> work_;          // one per thread: chunks of images
  mutable std::vector<std::vector<float>> accumulators_;  // one per thread: weight gradients
  mutable std::vector<std::vector<float>> unpooled_;      // one per thread: a chunk's dz
  mutable std::vector<float> packed_, flipped_;           // a convolution's weights, packed
  mutable std::vector<float> scaled_;                     // gemm's product before alpha and beta
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, const std::string& isa) {
  const cpu::Isa best = cpu::best_isa();
  if (isa.empty()) return std::make_unique<CpuBackend>(threads, best);
  for (cpu::Isa i : {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512})
    if (isa == cpu::isa_name(i)) {
      if (i > best)
        throw std::invalid_argument("cpu:" + isa + ": this CPU's best instruction set is " +
                                    cpu::isa_name(best));
      return std::make_unique<CpuBackend>(threads, i);
    }
  throw std::invalid_argument("cpu:" + isa +
                              ": unknown instruction set (expected avx512, avx2 or portable)");
}

}  // namespace hippo::kernels
