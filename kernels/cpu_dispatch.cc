// Dispatch of the CPU products and convolutions to the implementation for an instruction set,
// the CPU's best instruction set, and the sizes of their buffers.
#include <cstdlib>
#include <new>

#include "kernels/cpu_conv.h"
#include "kernels/cpu_gemm.h"
#include "kernels/cpu_optimizer.h"

namespace hippo::kernels::cpu {

Isa best_isa() {
  // libgcc's checks include the OS's support for the wider register state (XCR0).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kPortable:
      break;
  }
  return "portable";
}

namespace {
float* allocate_floats(int64_t n) {
  void* p = std::aligned_alloc(64, static_cast<size_t>(n * 4 + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return static_cast<float*>(p);
}
}  // namespace

GemmBuffers::GemmBuffers()
    : a_(allocate_floats(int64_t{kMc + kMaxMr} * kKc)),
      b_(allocate_floats(int64_t{kNc + kMaxNr} * kKc)) {}

GemmBuffers::~GemmBuffers() {
  std::free(a_);
  std::free(b_);
}

void gemm(Isa isa, int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
          GemmBuffers& buffers) {
  switch (isa) {
    case Isa::kAvx512:
      return gemm_avx512(m, n, k, a, b, c, ldc, e, buffers);
    case Isa::kAvx2:
      return gemm_avx2(m, n, k, a, b, c, ldc, e, buffers);
    case Isa::kPortable:
      break;
  }
  gemm_portable(m, n, k, a, b, c, ldc, e, buffers);
}

int64_t conv_acc_width(const ConvShape& s) {
  return (int64_t{s.out_channels} + kMaxNr - 1) / kMaxNr * kMaxNr;
}

int64_t conv_packed_weights_size(const ConvShape& s) {
  return conv_acc_width(s) * s.col_rows();
}

int64_t conv_work_size(const ConvShape& s, int nb) {
  // cpu_conv_impl.h: the padded images with slack, the transposed output gradient, the offsets
  // (int64, two floats each), the bias per block of channels, the staged plane of outputs and a
  // spare one, and alignment between them.
  const int64_t padded =
      int64_t{s.in_channels} * nb * (s.height + 2 * s.pad) * (s.width + 2 * s.pad);
  const int64_t gradient = conv_acc_width(s) * nb * s.out_height() * s.out_width();
  const int64_t staged = 2 * int64_t{s.out_height()} * s.out_width() * kMaxNr;
  return padded + kMaxMr + s.kernel + gradient + 2 * s.col_rows() + conv_acc_width(s) + staged + 64;
}

void conv_pack_weights(Isa isa, const ConvShape& s, const float* w, float* packed) {
  switch (isa) {
    case Isa::kAvx512:
      return conv_pack_weights_avx512(s, w, packed);
    case Isa::kAvx2:
      return conv_pack_weights_avx2(s, w, packed);
    case Isa::kPortable:
      break;
  }
  conv_pack_weights_portable(s, w, packed);
}

void conv_forward(Isa isa, const ConvShape& s, Chunk<const float> x, const float* packed,
                  const float* bias, Chunk<float> y, int nb, float* work) {
  switch (isa) {
    case Isa::kAvx512:
      return conv_forward_avx512(s, x, packed, bias, y, nb, work);
    case Isa::kAvx2:
      return conv_forward_avx2(s, x, packed, bias, y, nb, work);
    case Isa::kPortable:
      break;
  }
  conv_forward_portable(s, x, packed, bias, y, nb, work);
}

void conv_pool_forward(Isa isa, const ConvShape& s, Chunk<const float> x, const float* packed,
                       const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                       float* work) {
  switch (isa) {
    case Isa::kAvx512:
      return conv_pool_forward_avx512(s, x, packed, bias, y, codes, nb, work);
    case Isa::kAvx2:
      return conv_pool_forward_avx2(s, x, packed, bias, y, codes, nb, work);
    case Isa::kPortable:
      break;
  }
  conv_pool_forward_portable(s, x, packed, bias, y, codes, nb, work);
}

void conv_weight_grad(Isa isa, const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                      float* acc, int r0, int r1, int nb, float* work) {
  switch (isa) {
    case Isa::kAvx512:
      return conv_weight_grad_avx512(s, x, dy, acc, r0, r1, nb, work);
    case Isa::kAvx2:
      return conv_weight_grad_avx2(s, x, dy, acc, r0, r1, nb, work);
    case Isa::kPortable:
      break;
  }
  conv_weight_grad_portable(s, x, dy, acc, r0, r1, nb, work);
}

void sgd_update(Isa isa, float* params, const float* grads, float* buf, int64_t n,
                const SgdParams& hp) {
  switch (isa) {
    case Isa::kAvx512:
      return sgd_update_avx512(params, grads, buf, n, hp);
    case Isa::kAvx2:
      return sgd_update_avx2(params, grads, buf, n, hp);
    case Isa::kPortable:
      break;
  }
  sgd_update_portable(params, grads, buf, n, hp);
}

void adam_update(Isa isa, float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, float step, float inv_sqrt_bc2) {
  switch (isa) {
    case Isa::kAvx512:
      return adam_update_avx512(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
    case Isa::kAvx2:
      return adam_update_avx2(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
    case Isa::kPortable:
      break;
  }
  adam_update_portable(params, grads, m, v, n, hp, step, inv_sqrt_bc2);
}

}  // namespace hippo::kernels::cpu
