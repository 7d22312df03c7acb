// Max and average pooling as CUDA kernels, on planes x[planes, H, W] (kernels.h). Our own rather
// than cuDNN's: max pooling's gradient must go to the first maximum of each window in row-major
// order, as on the CPU (cuDNN does not document which of tied maxima it picks, and ties are common:
// a window of a zero background convolves to zeros), and cuDNN's backward needs the pooled output,
// which the CNN block overwrites in place with its bias and ReLU. Gradients are gathers (one
// thread per input value), so no atomics are needed.
#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

// Offset from `window` (the top-left of a k x k window in rows of width w) of its first maximum
// in row-major order, as the CPU backend picks it.
__device__ int window_argmax(const float* window, int w, int k) {
  int at = 0;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      if (window[i * w + j] > window[at]) at = i * w + j;
  return at;
}

// One thread per output value y[plane, oy, ox].
__global__ void maxpool_forward_kernel(const float* x, float* y, int64_t planes, int h, int w,
                                       int k) {
  const int ho = h / k, wo = w / k;
  HIPPO_GRID_STRIDE(i, planes * ho * wo) {
    const int ox = static_cast<int>(i % wo), oy = static_cast<int>(i / wo % ho);
    const float* window = x + (i / (int64_t{ho} * wo) * h + int64_t{oy} * k) * w + ox * k;
    y[i] = window[window_argmax(window, w, k)];
  }
}

// One thread per input value: the window's gradient if this value is the window's first
// maximum, else 0 (also for a remainder row or column that no window covers).
__global__ void maxpool_backward_kernel(const float* x, const float* dy, float* dx, int64_t planes,
                                        int h, int w, int k) {
  const int ho = h / k, wo = w / k;
  HIPPO_GRID_STRIDE(i, planes * h * w) {
    const int ix = static_cast<int>(i % w), iy = static_cast<int>(i / w % h);
    const int64_t p = i / (int64_t{h} * w);
    const int oy = iy / k, ox = ix / k;
    float g = 0;
    if (oy < ho && ox < wo) {
      const int64_t top_left = (p * h + int64_t{oy} * k) * w + ox * k;
      if (top_left + window_argmax(x + top_left, w, k) == i) g = dy[(p * ho + oy) * wo + ox];
    }
    dx[i] = g;
  }
}

__global__ void avgpool_forward_kernel(const float* x, float* y, int64_t planes, int h, int w,
                                       int k) {
  const int ho = h / k, wo = w / k;
  const float scale = 1.0f / static_cast<float>(k * k);
  HIPPO_GRID_STRIDE(i, planes * ho * wo) {
    const int ox = static_cast<int>(i % wo), oy = static_cast<int>(i / wo % ho);
    const float* window = x + (i / (int64_t{ho} * wo) * h + int64_t{oy} * k) * w + ox * k;
    float s = 0;
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) s += window[a * w + b];
    y[i] = s * scale;
  }
}

__global__ void avgpool_backward_kernel(const float* dy, float* dx, int64_t planes, int h, int w,
                                        int k) {
  const int ho = h / k, wo = w / k;
  const float scale = 1.0f / static_cast<float>(k * k);
  HIPPO_GRID_STRIDE(i, planes * h * w) {
    const int ix = static_cast<int>(i % w), iy = static_cast<int>(i / w % h);
    const int64_t p = i / (int64_t{h} * w);
    const int oy = iy / k, ox = ix / k;
    dx[i] = oy < ho && ox < wo ? dy[(p * ho + oy) * wo + ox] * scale : 0.0f;
  }
}

}  // namespace

void maxpool_forward(cudaStream_t stream, const float* x, float* y, int64_t planes, int h, int w,
                     int k) {
  const int64_t n = planes * (h / k) * (w / k);
  if (n == 0) return;
  maxpool_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, planes, h, w, k);
  HIPPO_CUDA_CHECK_LAUNCH("maxpool_forward_kernel");
}

void maxpool_backward(cudaStream_t stream, const float* x, const float* dy, float* dx,
                      int64_t planes, int h, int w, int k) {
  const int64_t n = planes * h * w;
  if (n == 0) return;
  maxpool_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, dy, dx, planes, h, w, k);
  HIPPO_CUDA_CHECK_LAUNCH("maxpool_backward_kernel");
}

void avgpool_forward(cudaStream_t stream, const float* x, float* y, int64_t planes, int h, int w,
                     int k) {
  const int64_t n = planes * (h / k) * (w / k);
  if (n == 0) return;
  avgpool_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, planes, h, w, k);
  HIPPO_CUDA_CHECK_LAUNCH("avgpool_forward_kernel");
}

void avgpool_backward(cudaStream_t stream, const float* dy, float* dx, int64_t planes, int h, int w,
                      int k) {
  const int64_t n = planes * h * w;
  if (n == 0) return;
  avgpool_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dy, dx, planes, h, w, k);
  HIPPO_CUDA_CHECK_LAUNCH("avgpool_backward_kernel");
}

}  // namespace hippo::kernels::cuda
