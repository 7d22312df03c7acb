// The CUDA kernels behind CudaBackend (cuda_backend.cu), one launcher per operation, grouped in
// one file per kind of operation. Every pointer is device memory; every launcher enqueues its
// work on `stream` and returns without waiting. The contracts (shapes, layouts, what is
// overwritten) are those of the same-named Backend operations in kernels.h.
//
// Determinism: each output element is written by one thread, and every reduction adds in a fixed
// tree order that depends on the sizes only (no atomics), so the bits never depend on timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/im2col.h"
#include "kernels/kernels.h"

namespace hippo::kernels::cuda {

// cuda_elementwise.cu
void bias_forward(cudaStream_t stream, float* y, const float* bias, int64_t outer, int64_t channels,
                  int64_t inner);
void bias_backward(cudaStream_t stream, const float* dy, float* dbias, int64_t outer,
                   int64_t channels, int64_t inner);
void relu_forward(cudaStream_t stream, const float* x, float* y, int64_t n);
void relu_backward(cudaStream_t stream, const float* y, const float* dy, float* dx, int64_t n);
void gelu_forward(cudaStream_t stream, const float* x, float* y, int64_t n);
void gelu_backward(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n);
// y[b, a, inner] = x[a, b, inner] (kernels.h), also converting between float and bf16 (for
// float -> float, float -> bf16 and bf16 -> float).
template <typename In, typename Out>
void swap_outer_axes(cudaStream_t stream, const In* x, Out* y, int64_t a, int64_t b, int64_t inner);
// y[n] = x[n] as Out: fp32 -> bf16 rounds to nearest even, bf16 -> fp32 is exact.
template <typename In, typename Out>
void convert(cudaStream_t stream, const In* x, Out* y, int64_t n);

// cuda_im2col.cu, for the im2col convolutions (im2col.h): col[R, N] from x, dx from dcol[R, N]
// (overwritten), and sum[n] = partials[0][n] + ... + partials[count - 1][n] in that order.
void im2col(cudaStream_t stream, const Im2col& g, const float* x, float* col);
void col2im(cudaStream_t stream, const Im2col& g, const float* dcol, float* dx);
void add_partials(cudaStream_t stream, const float* partials, int64_t count, int64_t n, float* sum);

// cuda_pool.cu (cuDNN's convolutions: cuda_conv.cuh)
void maxpool_forward(cudaStream_t stream, const float* x, float* y, int64_t planes, int h, int w,
                     int k);
void maxpool_backward(cudaStream_t stream, const float* x, const float* dy, float* dx,
                      int64_t planes, int h, int w, int k);
void avgpool_forward(cudaStream_t stream, const float* x, float* y, int64_t planes, int h, int w,
                     int k);
void avgpool_backward(cudaStream_t stream, const float* dy, float* dx, int64_t planes, int h, int w,
                      int k);

// A label or token out of range cannot throw on the device: the kernel that sees it records it
// in bad_index[kBadIndexSize] (fields below) unless a record is already there, leaves its outputs
// NaN (losses, gradients, embeddings) and never reads out of bounds. The record is the first
// failing launch's, but with several bad rows in that launch any one of them (the CPU backend
// names the lowest). The backend keeps the record's row at -1 and reads it back at its next
// synchronization, to throw a clear error.
enum BadIndex { kBadRow, kBadValue, kBadLimit, kBadKind, kBadIndexSize };
enum BadKind { kBadLabel, kBadToken };
__device__ inline void record_bad_index(int32_t* bad_index, int64_t row, int32_t value,
                                        int32_t limit, int32_t kind) {
  // An error report, not a reduction: which row wins a race changes no result (the call fails).
  if (atomicCAS(bad_index + kBadRow, -1, static_cast<int32_t>(row)) == -1) {
    bad_index[kBadValue] = value;
    bad_index[kBadLimit] = limit;
    bad_index[kBadKind] = kind;
  }
}

// cuda_loss.cu.
void softmax_cross_entropy(cudaStream_t stream, const float* logits, const int32_t* labels,
                           int batch, int classes, float* losses, float* dlogits, float grad_scale,
                           int32_t* bad_index);
// *correct = number of rows whose first maximum is at the label.
void count_correct(cudaStream_t stream, const float* logits, const int32_t* labels, int batch,
                   int classes, int64_t* correct, int32_t* bad_index);
// *total = sum of x[n] in double; partials holds kSumPartials doubles of scratch.
constexpr int kSumPartials = 1024;
void sum(cudaStream_t stream, const float* x, int64_t n, double* partials, double* total);

// cuda_optimizer.cu: one fused kernel per optimizer over the whole parameter buffer.
void sgd_update(cudaStream_t stream, float* params, const float* grads, float* buf, int64_t n,
                const SgdParams& hp);
void adam_update(cudaStream_t stream, float* params, const float* grads, float* m, float* v,
                 int64_t n, const AdamParams& hp);

}  // namespace hippo::kernels::cuda
