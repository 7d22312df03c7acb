// The CPU products and convolutions for AVX2 + FMA (cpu_gemm_impl.h, cpu_conv_impl.h; this file is
// compiled with -mavx2 -mfma). Register tiles (of the 16 vector registers): the product 6 rows x 2
// vectors of 8 floats (12 hold C), or 8 rows x 1 vector for narrow products; the convolution 6
// positions x 16 channels (12), its weight gradient 9 rows x 8 channels (9).
#include <immintrin.h>

#include "kernels/cpu_avx.h"
#include "kernels/cpu_conv_impl.h"
#include "kernels/cpu_gemm_impl.h"
#include "kernels/cpu_optimizer_impl.h"

namespace hippo::kernels::cpu {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8, kMr = 6, kNv = 2, kMrNarrow = 8;
  static constexpr int kConvMr = 6, kConvNv = 2, kWgradMr = 9, kWgradNv = 1;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // Lanes below n all ones (the masked loads and stores read a lane's sign bit).
  static __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_first(const float* p, int n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_first(float* p, V v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  // max(v, 0) returns its second operand, 0, when v is NaN: as the scalar v > 0 ? v : 0.
  static V relu(V v) { return _mm256_max_ps(v, _mm256_setzero_ps()); }
  static void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    cpu::transpose8x8(src, lds, dst, ldd);
  }
};

}  // namespace

void gemm_avx2(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
               GemmBuffers& buffers) {
  impl::gemm<Avx2>(m, n, k, a, b, c, ldc, e, buffers);
}

void conv_pack_weights_avx2(const ConvShape& s, const float* w, float* packed) {
  impl::Conv<Avx2>::pack_weights(s, w, packed);
}

void conv_forward_avx2(const ConvShape& s, Chunk<const float> x, const float* packed,
                       const float* bias, Chunk<float> y, int nb, float* work) {
  impl::Conv<Avx2>::forward(s, x, packed, bias, y, nb, work);
}

void conv_pool_forward_avx2(const ConvShape& s, Chunk<const float> x, const float* packed,
                            const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                            float* work) {
  impl::Conv<Avx2>::forward_pool(s, x, packed, bias, y, codes, nb, work);
}

void conv_weight_grad_avx2(const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                           float* acc, int r0, int r1, int nb, float* work) {
  impl::Conv<Avx2>::weight_grad(s, x, dy, acc, r0, r1, nb, work);
}

void sgd_update_avx2(float* params, const float* grads, float* buf, int64_t n,
                     const SgdParams& hp) {
  impl::sgd_update(params, grads, buf, n, hp);
}

void adam_update_avx2(float* params, const float* grads, float* m, float* v, int64_t n,
                      const AdamParams& hp, float step, float inv_sqrt_bc2) {
  impl::adam_update(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
}

}  // namespace hippo::kernels::cpu
