// The CPU backend's transformer operations (kernels.h states their semantics: shapes, what is
// overwritten and what accumulated, the order of every sum). Internal to kernels/: CpuBackend
// forwards its overrides here with its thread pool. Every output element is written by one chunk
// of the pool in a fixed order, so the bits do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/parallel.h"

namespace hippo::kernels::cpu {

void add(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n);

void embedding_forward(ThreadPool& pool, const int32_t* tokens, const float* wte, const float* wpe,
                       float* out, int B, int T, int C, int V);
void embedding_backward(ThreadPool& pool, const int32_t* tokens, const float* dout, float* dwte,
                        float* dwpe, int B, int T, int C, int V);

void layernorm_forward(ThreadPool& pool, const float* x, const float* weight, const float* bias,
                       float* out, float* mean, float* rstd, int64_t N, int C);
void layernorm_backward(ThreadPool& pool, const float* dout, const float* x, const float* weight,
                        const float* mean, const float* rstd, float* dx, float* dweight,
                        float* dbias, int64_t N, int C);

void attention_forward(ThreadPool& pool, const float* qkv, float* out, float* att, int B, int T,
                       int C, int NH);
void attention_backward(ThreadPool& pool, const float* dout, const float* qkv, const float* att,
                        float* scratch, float* dqkv, int B, int T, int C, int NH);

}  // namespace hippo::kernels::cpu
