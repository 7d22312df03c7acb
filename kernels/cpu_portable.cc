// The CPU products and convolutions in portable C++ (cpu_gemm_impl.h, cpu_conv_impl.h), for CPUs
// without AVX2: the same chains of fused multiply-adds, one float at a time (std::fma; slow without
// FMA hardware).
#include <cmath>

#include "kernels/cpu_conv_impl.h"
#include "kernels/cpu_gemm_impl.h"
#include "kernels/cpu_optimizer_impl.h"

namespace hippo::kernels::cpu {
namespace {

struct Portable {
  using V = float;
  static constexpr int kLanes = 1, kMr = 4, kNv = 4, kMrNarrow = 4;
  static constexpr int kConvMr = 4, kConvNv = 4, kWgradMr = 4, kWgradNv = 4;
  static V zero() { return 0.0f; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V load_first(const float* p, int) { return *p; }  // n is always 1 lane
  static void store_first(float* p, V v, int) { *p = v; }
  static V broadcast(float x) { return x; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static V add(V a, V b) { return a + b; }
  static V relu(V v) { return v > 0 ? v : 0.0f; }
  static void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
};

}  // namespace

void gemm_portable(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
                   GemmBuffers& buffers) {
  impl::gemm<Portable>(m, n, k, a, b, c, ldc, e, buffers);
}

void conv_pack_weights_portable(const ConvShape& s, const float* w, float* packed) {
  impl::Conv<Portable>::pack_weights(s, w, packed);
}

void conv_forward_portable(const ConvShape& s, Chunk<const float> x, const float* packed,
                           const float* bias, Chunk<float> y, int nb, float* work) {
  impl::Conv<Portable>::forward(s, x, packed, bias, y, nb, work);
}

void conv_pool_forward_portable(const ConvShape& s, Chunk<const float> x, const float* packed,
                                const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                                float* work) {
  impl::Conv<Portable>::forward_pool(s, x, packed, bias, y, codes, nb, work);
}

void conv_weight_grad_portable(const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                               float* acc, int r0, int r1, int nb, float* work) {
  impl::Conv<Portable>::weight_grad(s, x, dy, acc, r0, r1, nb, work);
}

void sgd_update_portable(float* params, const float* grads, float* buf, int64_t n,
                         const SgdParams& hp) {
  impl::sgd_update(params, grads, buf, n, hp);
}

void adam_update_portable(float* params, const float* grads, float* m, float* v, int64_t n,
                          const AdamParams& hp, float step, float inv_sqrt_bc2) {
  impl::adam_update(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
}

}  // namespace hippo::kernels::cpu
