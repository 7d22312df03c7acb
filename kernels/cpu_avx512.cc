// The CPU products and convolutions for AVX-512 (cpu_gemm_impl.h, cpu_conv_impl.h; this file is
// compiled with -mavx512f -mfma). Register tiles (of the 32 vector registers): the product 8 rows x
// 2 vectors of 16 floats (16 hold C), or 16 rows x 1 vector for narrow products; the convolution 14
// positions x 32 channels (28), its weight gradient 9 rows x 32 channels (18).
#include <immintrin.h>

#include "kernels/cpu_avx.h"
#include "kernels/cpu_conv_impl.h"
#include "kernels/cpu_gemm_impl.h"
#include "kernels/cpu_optimizer_impl.h"

namespace hippo::kernels::cpu {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16, kMr = 8, kNv = 2, kMrNarrow = 16;
  static constexpr int kConvMr = 14, kConvNv = 2, kWgradMr = 9, kWgradNv = 2;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_first(float* p, V v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  // max(v, 0) returns its second operand, 0, when v is NaN: as the scalar v > 0 ? v : 0. (The
  // all-lanes maskz form: GCC 12 warns about _mm512_max_ps's undefined pass-through operand.)
  static V relu(V v) { return _mm512_maskz_max_ps(0xFFFF, v, _mm512_setzero_ps()); }
  static void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    cpu::transpose8x8(src, lds, dst, ldd);
  }
};

}  // namespace

void gemm_avx512(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
                 GemmBuffers& buffers) {
  impl::gemm<Avx512>(m, n, k, a, b, c, ldc, e, buffers);
}

void conv_pack_weights_avx512(const ConvShape& s, const float* w, float* packed) {
  impl::Conv<Avx512>::pack_weights(s, w, packed);
}

void conv_forward_avx512(const ConvShape& s, Chunk<const float> x, const float* packed,
                         const float* bias, Chunk<float> y, int nb, float* work) {
  impl::Conv<Avx512>::forward(s, x, packed, bias, y, nb, work);
}

void conv_pool_forward_avx512(const ConvShape& s, Chunk<const float> x, const float* packed,
                              const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                              float* work) {
  impl::Conv<Avx512>::forward_pool(s, x, packed, bias, y, codes, nb, work);
}

void conv_weight_grad_avx512(const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                             float* acc, int r0, int r1, int nb, float* work) {
  impl::Conv<Avx512>::weight_grad(s, x, dy, acc, r0, r1, nb, work);
}

void sgd_update_avx512(float* params, const float* grads, float* buf, int64_t n,
                       const SgdParams& hp) {
  impl::sgd_update(params, grads, buf, n, hp);
}

void adam_update_avx512(float* params, const float* grads, float* m, float* v, int64_t n,
                        const AdamParams& hp, float step, float inv_sqrt_bc2) {
  impl::adam_update(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
}

}  // namespace hippo::kernels::cpu
