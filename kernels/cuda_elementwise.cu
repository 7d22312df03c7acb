// Element-wise CUDA kernels: bias (forward and its reduction), ReLU, GELU, the outer-axes swap
// and the conversions between fp32 and bf16 (the operands and results of bf16 products).
// Grid-stride loops, one thread per output element; the bias reduction adds in a fixed tree order.
#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void bias_forward_kernel(float* y, const float* bias, int64_t n, int64_t channels,
                                    int64_t inner) {
  HIPPO_GRID_STRIDE(i, n) y[i] += bias[i / inner % channels];
}

// dy[outer, channels] (inner == 1): block (32, kRows) sums 32 adjacent channels, thread (x, y)
// the rows y, y + kRows, ... of channel x (reads coalesced along channels), then the kRows
// partial sums of each channel are added in a fixed tree order.
constexpr int kRows = 16;
__global__ void bias_backward_rows_kernel(const float* dy, float* dbias, int64_t outer,
                                          int64_t channels) {
  __shared__ float partial[kRows][33];  // 33: no bank conflicts between the rows
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float s = 0;
  if (c < channels)
    for (int64_t o = threadIdx.y; o < outer; o += kRows) s += dy[o * channels + c];
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int half = kRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half)
      partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < channels) dbias[c] = partial[0][threadIdx.x];
}

// dy[outer, channels, inner]: one block per channel, its threads striding over (outer, inner).
__global__ void bias_backward_planes_kernel(const float* dy, float* dbias, int64_t outer,
                                            int64_t channels, int64_t inner) {
  __shared__ float shared[kBlock];
  const int64_t c = blockIdx.x;
  float s = 0;
  for (int64_t j = threadIdx.x; j < outer * inner; j += blockDim.x)
    s += dy[(j / inner * channels + c) * inner + j % inner];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) dbias[c] = s;
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = v > 0 ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

// Values read as float and written as Out (bf16: rounded to nearest even).
__device__ inline float as_float(float v) {
  return v;
}
__device__ inline float as_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename Out>
__device__ Out from_float(float v);
template <>
__device__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// y[b, a, inner] = x[a, b, inner], one thread per value of y.
template <typename In, typename Out>
__global__ void swap_outer_axes_kernel(const In* x, Out* y, int64_t a, int64_t b, int64_t inner) {
  HIPPO_GRID_STRIDE(i, a * b * inner) {
    const int64_t t = i % inner, row = i / inner;  // row = j * a + ia
    const int64_t ia = row % a, j = row / a;
    y[i] = from_float<Out>(as_float(x[(ia * b + j) * inner + t]));
  }
}

template <typename In, typename Out>
__global__ void convert_kernel(const In* x, Out* y, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) y[i] = from_float<Out>(as_float(x[i]));
}

}  // namespace

void bias_forward(cudaStream_t stream, float* y, const float* bias, int64_t outer, int64_t channels,
                  int64_t inner) {
  const int64_t n = outer * channels * inner;
  if (n == 0) return;
  bias_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, bias, n, channels, inner);
  HIPPO_CUDA_CHECK_LAUNCH("bias_forward_kernel");
}

void bias_backward(cudaStream_t stream, const float* dy, float* dbias, int64_t outer,
                   int64_t channels, int64_t inner) {
  if (channels == 0) return;
  if (inner == 1) {
    const unsigned blocks = static_cast<unsigned>((channels + 31) / 32);
    bias_backward_rows_kernel<<<blocks, dim3(32, kRows), 0, stream>>>(dy, dbias, outer, channels);
    HIPPO_CUDA_CHECK_LAUNCH("bias_backward_rows_kernel");
    return;
  }
  bias_backward_planes_kernel<<<static_cast<unsigned>(channels), kBlock, 0, stream>>>(
      dy, dbias, outer, channels, inner);
  HIPPO_CUDA_CHECK_LAUNCH("bias_backward_planes_kernel");
}

void relu_forward(cudaStream_t stream, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  HIPPO_CUDA_CHECK_LAUNCH("relu_forward_kernel");
}

void relu_backward(cudaStream_t stream, const float* y, const float* dy, float* dx, int64_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, dy, dx, n);
  HIPPO_CUDA_CHECK_LAUNCH("relu_backward_kernel");
}

void gelu_forward(cudaStream_t stream, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  HIPPO_CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(cudaStream_t stream, const float* x, const float* dy, float* dx, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, dy, dx, n);
  HIPPO_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

template <typename In, typename Out>
void swap_outer_axes(cudaStream_t stream, const In* x, Out* y, int64_t a, int64_t b,
                     int64_t inner) {
  const int64_t n = a * b * inner;
  if (n == 0) return;
  swap_outer_axes_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, a, b, inner);
  HIPPO_CUDA_CHECK_LAUNCH("swap_outer_axes_kernel");
}
template void swap_outer_axes(cudaStream_t, const float*, float*, int64_t, int64_t, int64_t);
template void swap_outer_axes(cudaStream_t, const float*, __nv_bfloat16*, int64_t, int64_t,
                              int64_t);
template void swap_outer_axes(cudaStream_t, const __nv_bfloat16*, float*, int64_t, int64_t,
                              int64_t);

template <typename In, typename Out>
void convert(cudaStream_t stream, const In* x, Out* y, int64_t n) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  HIPPO_CUDA_CHECK_LAUNCH("convert_kernel");
}
template void convert(cudaStream_t, const float*, __nv_bfloat16*, int64_t);
template void convert(cudaStream_t, const __nv_bfloat16*, float*, int64_t);

}  // namespace hippo::kernels::cuda
