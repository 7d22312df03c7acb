// The CUDA kernels of the transformer operations (cuda_transformer.cu), behind CudaBackend. The
// contracts (shapes, what is overwritten and what accumulated, the order of every sum over
// positions) are those of the same-named Backend operations in kernels.h; every launcher
// enqueues on `stream`. No atomics: each output value is written by one thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hippo::kernels::cuda {

void add(cudaStream_t stream, const float* a, const float* b, float* y, int64_t n);

// A token outside [0, V) is recorded in bad_index (cuda_ops.cuh) and its row of out is NaN.
void embedding_forward(cudaStream_t stream, const int32_t* tokens, const float* wte,
                       const float* wpe, float* out, int B, int T, int C, int V,
                       int32_t* bad_index);
// dwte: one block per (vocabulary row, 256 channels) scans every position in order, so the cost
// is O(V B T): right for the small vocabularies hippo trains, not for GPT-2's 50k tokens.
void embedding_backward(cudaStream_t stream, const int32_t* tokens, const float* dout, float* dwte,
                        float* dwpe, int B, int T, int C, int V);

void layernorm_forward(cudaStream_t stream, const float* x, const float* weight, const float* bias,
                       float* out, float* mean, float* rstd, int64_t N, int C);
void layernorm_backward(cudaStream_t stream, const float* dout, const float* x, const float* weight,
                        const float* mean, const float* rstd, float* dx, float* dweight,
                        float* dbias, int64_t N, int C);

void attention_forward(cudaStream_t stream, const float* qkv, float* out, float* att, int B, int T,
                       int C, int NH);
void attention_backward(cudaStream_t stream, const float* dout, const float* qkv, const float* att,
                        float* scratch, float* dqkv, int B, int T, int C, int NH);

}  // namespace hippo::kernels::cuda
