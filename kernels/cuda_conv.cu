// Convolution's data movement (im2col and its adjoint col2im) and pooling, as CUDA kernels on the
// CNHW layout of kernels.h. The convolution's products are cuBLAS calls in cuda_backend.cu.
// Gradients are gathers (one thread per input value, reading the outputs that used it), so no
// two threads add into one value and no atomics are needed.
#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

// col[(c, ki, kj), (b, oy, ox)] = x[c, b, oy + ki - pad, ox + kj - pad], 0 outside the image.
// ConvShape's helpers are host code: the launchers pass the output size ho x wo.
__global__ void im2col_kernel(ConvShape s, int ho, int wo, const float* x, float* col) {
  const int h = s.height, w = s.width, k = s.kernel;
  const int64_t cols = int64_t{s.batch} * ho * wo;
  HIPPO_GRID_STRIDE(i, int64_t{s.in_channels} * k * k * cols) {
    const int64_t r = i / cols, q = i % cols;
    const int c = static_cast<int>(r / (k * k)), ki = static_cast<int>(r / k % k),
              kj = static_cast<int>(r % k);
    const int64_t b = q / (int64_t{ho} * wo);
    const int oy = static_cast<int>(q / wo % ho), ox = static_cast<int>(q % wo);
    const int iy = oy + ki - s.pad, ix = ox + kj - s.pad;
    col[i] = iy >= 0 && iy < h && ix >= 0 && ix < w
                 ? x[((int64_t{c} * s.batch + b) * h + iy) * w + ix]
                 : 0.0f;
  }
}

// dx[c, b, y, x] = sum over (ki, kj), in row-major order as the CPU backend adds them, of
// dcol[(c, ki, kj), (b, y - ki + pad, x - kj + pad)] where that output position exists.
__global__ void col2im_kernel(ConvShape s, int ho, int wo, const float* dcol, float* dx) {
  const int h = s.height, w = s.width, k = s.kernel;
  const int64_t cols = int64_t{s.batch} * ho * wo;
  HIPPO_GRID_STRIDE(i, int64_t{s.in_channels} * s.batch * h * w) {
    const int ix = static_cast<int>(i % w), iy = static_cast<int>(i / w % h);
    const int64_t b = i / (int64_t{h} * w) % s.batch, c = i / (int64_t{h} * w * s.batch);
    float sum = 0;
    for (int ki = 0; ki < k; ++ki) {
      const int oy = iy - ki + s.pad;
      if (oy < 0 || oy >= ho) continue;
      for (int kj = 0; kj < k; ++kj) {
        const int ox = ix - kj + s.pad;
        if (ox < 0 || ox >= wo) continue;
        sum += dcol[((c * k + ki) * k + kj) * cols + (b * ho + oy) * wo + ox];
      }
    }
    dx[i] = sum;
  }
}

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

void im2col(cudaStream_t stream, const ConvShape& s, const float* x, float* col) {
  const int64_t n = s.col_rows() * s.col_cols();
  if (n == 0) return;
  im2col_kernel<<<grid_for(n), kBlock, 0, stream>>>(s, s.out_height(), s.out_width(), x, col);
  HIPPO_CUDA_CHECK_LAUNCH("im2col_kernel");
}

void col2im(cudaStream_t stream, const ConvShape& s, const float* dcol, float* dx) {
  const int64_t n = int64_t{s.in_channels} * s.batch * s.height * s.width;
  if (n == 0) return;
  col2im_kernel<<<grid_for(n), kBlock, 0, stream>>>(s, s.out_height(), s.out_width(), dcol, dx);
  HIPPO_CUDA_CHECK_LAUNCH("col2im_kernel");
}

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
