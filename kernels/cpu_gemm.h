// Matrix products of the CPU backend, hippo's own: packed panels and a register-tile micro-kernel
// (BLIS's structure), one implementation (cpu_gemm_impl.h) compiled for each instruction set and
// picked at run time from the CPU's features. Internal to kernels/.
//
// Bits. Every value of C is one chain of fused multiply-adds over p = 0, 1, ..., k-1 in order,
// from 0 (or from C's value, with Epilogue::accumulate), then the epilogue. The chain never
// depends on the instruction set (vector width, tile and block sizes only choose which values are
// computed together), nor on how C is cut into blocks for threads: AVX-512, AVX2 and the portable
// code give the same bits (tests/kernels/cpu_gemm_test.cc checks it).
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace hippo::kernels::cpu {

// The instruction sets the kernels are compiled for, from the most widely available.
enum class Isa { kPortable, kAvx2, kAvx512 };

// The best instruction set this CPU (and its OS) supports.
Isa best_isa();
const char* isa_name(Isa isa);

// A matrix operand: element (r, c) at p[r * rs + c * cs]. Row-major [rows, ld]: {p, ld, 1}; its
// transpose: {p, 1, ld}.
struct View {
  const float* p;
  int64_t rs, cs;
};

// An SGD step (kernels.h's sgd_update) taken by a product whose C is the gradient of params:
// element (i, j) at params[i * ld + j], its momentum at momentum[i * ld + j] (null without
// momentum).
struct SgdStep {
  float* params;
  float* momentum;
  int64_t ld;
  SgdParams hp;
};

// What a product does with each value of C, in this order.
struct Epilogue {
  bool accumulate = false;          // the chain starts from C's value (else from 0)
  const float* row_bias = nullptr;  // c[i, j] += row_bias[i]
  const float* col_bias = nullptr;  // c[i, j] += col_bias[j]
  bool relu = false;                // c[i, j] = c[i, j] > 0 ? c[i, j] : 0
  // Then, with sgd: the parameter whose gradient c[i, j] is takes its SGD step (the same bits as
  // sgd_update over the stored C), and c[i, j] is not stored (C is left unspecified).
  const SgdStep* sgd = nullptr;
  // C is stored transposed: c[i, j] at c[j * ldc + i] (ldc >= m); else at c[i * ldc + j].
  bool transposed_c = false;
};

// One thread's packing buffers (allocated once, reused by every product).
class GemmBuffers {
 public:
  GemmBuffers();
  ~GemmBuffers();
  GemmBuffers(const GemmBuffers&) = delete;
  GemmBuffers& operator=(const GemmBuffers&) = delete;
  float* a() { return a_; }
  float* b() { return b_; }

 private:
  float* a_;
  float* b_;
};

// c[m, n] (rows ldc apart) = epilogue(sum over p of a[i, p] b[p, j]), on the calling thread.
// m, n >= 0; k >= 0 (k = 0: the chain is empty, c is 0 or kept).
void gemm(Isa isa, int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
          GemmBuffers& buffers);

// The per-instruction-set implementations (cpu_gemm_<isa>.cc) that gemm dispatches to.
void gemm_portable(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
                   GemmBuffers& buffers);
void gemm_avx2(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
               GemmBuffers& buffers);
void gemm_avx512(int m, int n, int k, View a, View b, float* c, int64_t ldc, const Epilogue& e,
                 GemmBuffers& buffers);

// Block sizes shared by every instruction set (cpu_gemm_impl.h): C is computed in blocks of at
// most kMc x kNc, the sum in slices of at most kKc values of p (kKcTransposed for a C stored
// transposed, whose partial sums cost a transposition each way; its blocks shrink so that their
// packed panels fit the buffers).
inline constexpr int kKc = 256, kMc = 192, kNc = 1024, kKcTransposed = 1024;
// Largest register tile over all instruction sets (buffers are sized for it).
inline constexpr int kMaxMr = 16, kMaxNr = 32;

}  // namespace hippo::kernels::cpu
