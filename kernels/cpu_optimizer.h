// The optimizer updates of the CPU backend over a range of the parameters, compiled for each
// instruction set (cpu_optimizer_impl.h) like the products: one pass over the contiguous
// parameter, gradient and state buffers, in the widest vectors the CPU has (with SSE2 alone the
// update was bound by its instruction count). Elementwise, without contraction into fused
// multiply-adds or any reordering, so every instruction set gives the same bits.
#pragma once

#include <cstdint>

#include "kernels/cpu_gemm.h"
#include "kernels/kernels.h"

namespace hippo::kernels::cpu {

// kernels.h's sgd_update of params[n] (buf may be null without momentum).
void sgd_update(Isa isa, float* params, const float* grads, float* buf, int64_t n,
                const SgdParams& hp);
// kernels.h's adam_update of params[n], with step = lr / (1 - beta1^t) and
// inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t) computed once by the caller.
void adam_update(Isa isa, float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, float step, float inv_sqrt_bc2);

// The per-instruction-set implementations (cpu_<isa>.cc).
void sgd_update_portable(float* params, const float* grads, float* buf, int64_t n,
                         const SgdParams& hp);
void sgd_update_avx2(float* params, const float* grads, float* buf, int64_t n, const SgdParams& hp);
void sgd_update_avx512(float* params, const float* grads, float* buf, int64_t n,
                       const SgdParams& hp);
void adam_update_portable(float* params, const float* grads, float* m, float* v, int64_t n,
                          const AdamParams& hp, float step, float inv_sqrt_bc2);
void adam_update_avx2(float* params, const float* grads, float* m, float* v, int64_t n,
                      const AdamParams& hp, float step, float inv_sqrt_bc2);
void adam_update_avx512(float* params, const float* grads, float* m, float* v, int64_t n,
                        const AdamParams& hp, float step, float inv_sqrt_bc2);

}  // namespace hippo::kernels::cpu
