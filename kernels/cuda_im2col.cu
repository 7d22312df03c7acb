// The element kernels of the CUDA backend's im2col convolutions (im2col.h says the layout and
// why; cuda_backend.cu runs the products between them on cuBLAS).
#include <algorithm>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"
#include "kernels/im2col.h"

namespace hippo::kernels::cuda {
namespace {

// Rows of the column matrix along the grid's y (grid-stride), columns along x: consecutive
// threads write consecutive columns of one row, with int arithmetic only.
__global__ void im2col_kernel(Im2col g, const float* x, float* col) {
  const int rows = static_cast<int>(g.rows()), cols = static_cast<int>(g.cols());
  for (int r = blockIdx.y; r < rows; r += gridDim.y)
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x)
      col[int64_t{r} * cols + j] = im2col_at(g, x, r, j);
}

// One thread per input value, gathering its terms (no atomics): x's planes along y, a plane's
// positions along x.
__global__ void col2im_kernel(Im2col g, const float* dcol, float* dx) {
  const int64_t planes = int64_t{g.channels} * g.batch;
  const int positions = g.h * g.w;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y)
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < positions; p += gridDim.x * blockDim.x)
      dx[plane * positions + p] = col2im_at(g, dcol, plane, p);
}

// A grid of rows (y, at most CUDA's 65535, the kernels stride over the rest) by blocks of
// columns (x), about as many threads as a 1-D grid_for would launch over rows * cols.
dim3 grid_2d(int64_t rows, int64_t cols) {
  const int64_t y = std::min<int64_t>(rows, 65535);
  const int64_t x = std::clamp<int64_t>((cols + kBlock - 1) / kBlock, 1,
                                        std::max<int64_t>(1, (int64_t{1} << 16) / y));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
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
  if (g.rows() == 0 || g.cols() == 0) return;
  im2col_kernel<<<grid_2d(g.rows(), g.cols()), kBlock, 0, stream>>>(g, x, col);
  HIPPO_CUDA_CHECK_LAUNCH("im2col_kernel");
}

void col2im(cudaStream_t stream, const Im2col& g, const float* dcol, float* dx) {
  const int64_t planes = int64_t{g.channels} * g.batch, positions = int64_t{g.h} * g.w;
  if (planes == 0 || positions == 0) return;
  col2im_kernel<<<grid_2d(planes, positions), kBlock, 0, stream>>>(g, dcol, dx);
  HIPPO_CUDA_CHECK_LAUNCH("col2im_kernel");
}

void add_partials(cudaStream_t stream, const float* partials, int64_t count, int64_t n,
                  float* sum) {
  if (n == 0) return;
  add_partials_kernel<<<grid_for(n), kBlock, 0, stream>>>(partials, count, n, sum);
  HIPPO_CUDA_CHECK_LAUNCH("add_partials_kernel");
}

}  // namespace hippo::kernels::cuda
