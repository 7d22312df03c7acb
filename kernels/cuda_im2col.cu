// The element kernels of the CUDA backend's im2col convolutions (im2col.h says the layout and
// why; cuda_backend.cu runs the products between them on cuBLAS).
#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"
#include "kernels/im2col.h"

namespace hippo::kernels::cuda {
namespace {

// One thread per column-matrix value: consecutive threads write consecutive columns of one row.
__global__ void im2col_kernel(Im2col g, const float* x, float* col) {
  HIPPO_GRID_STRIDE(i, g.rows() * g.cols()) col[i] = im2col_value(g, x, i);
}

// One thread per input value, gathering its terms (no atomics).
__global__ void col2im_kernel(Im2col g, const float* dcol, float* dx) {
  HIPPO_GRID_STRIDE(i, g.inputs()) dx[i] = col2im_value(g, dcol, i);
}

// sum[i] = partials[0][i] + partials[1][i] + ... in that order.
__global__ void add_partials_kernel(const float* partials, int64_t count, int64_t n, float* sum) {
  HIPPO_GRID_STRIDE(i, n) {
    float s = partials[i];
    for (int64_t p = 1; p < count; ++p) s += partials[p * n + i];
    sum[i] = s;
  }
}

}  // namespace

void im2col(cudaStream_t stream, const Im2col& g, const float* x, float* col) {
  const int64_t n = g.rows() * g.cols();
  if (n == 0) return;
  im2col_kernel<<<grid_for(n), kBlock, 0, stream>>>(g, x, col);
  HIPPO_CUDA_CHECK_LAUNCH("im2col_kernel");
}

void col2im(cudaStream_t stream, const Im2col& g, const float* dcol, float* dx) {
  const int64_t n = g.inputs();
  if (n == 0) return;
  col2im_kernel<<<grid_for(n), kBlock, 0, stream>>>(g, dcol, dx);
  HIPPO_CUDA_CHECK_LAUNCH("col2im_kernel");
}

void add_partials(cudaStream_t stream, const float* partials, int64_t count, int64_t n,
                  float* sum) {
  if (n == 0) return;
  add_partials_kernel<<<grid_for(n), kBlock, 0, stream>>>(partials, count, n, sum);
  HIPPO_CUDA_CHECK_LAUNCH("add_partials_kernel");
}

}  // namespace hippo::kernels::cuda
