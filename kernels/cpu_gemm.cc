// Dispatch of the CPU matrix product to the implementation for an instruction set, and the CPU's
// best instruction set.
#include "kernels/cpu_gemm.h"

#include <cstdlib>
#include <new>

namespace hippo::kernels::cpu {

Isa best_isa() {
  // libgcc's checks include the OS's support for the wider register state (XCR0).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
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

}  // namespace hippo::kernels::cpu
