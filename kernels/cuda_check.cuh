// Error checks for CUDA runtime calls, and the launch helpers every CUDA kernel file shares.
// Every call's status is checked: a failure throws std::runtime_error naming the call, the error
// and where it was made, so a bad device state is a clear error, never a silent wrong result.
// (cuBLAS calls are checked in cuda_backend.cu, which loads cuBLAS.)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hippo::kernels::cuda {

inline std::string call_site(const char* call, const char* file, int line) {
  return std::string(call) + " (" + file + ":" + std::to_string(line) + ")";
}

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw std::runtime_error("CUDA error " + std::string(cudaGetErrorName(status)) + ": " +
                             cudaGetErrorString(status) + " in " + call_site(call, file, line));
}

}  // namespace hippo::kernels::cuda

// HIPPO_CUDA_CHECK(cudaMalloc(&p, n));
#define HIPPO_CUDA_CHECK(call) ::hippo::kernels::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported at once, not at the next call.
#define HIPPO_CUDA_CHECK_LAUNCH(kernel) \
  ::hippo::kernels::cuda::check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)

// for (int64_t i = first index of this thread; i < n; i += all threads of the grid)
#define HIPPO_GRID_STRIDE(i, n)                                             \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

namespace hippo::kernels::cuda {

// Threads per block of the element-wise and reduction kernels (a power of two: the block
// reductions below halve it).
constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, no more.
inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, 1 << 16));
}

// Sum of v over the block, in a fixed tree order (so the bits never depend on timing). Every
// thread of the block must call it; blockDim.x must be a power of two and `shared` hold
// blockDim.x values. Returns the sum to every thread.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const unsigned t = threadIdx.x;
  __syncthreads();  // `shared` may still be read by a previous reduction
  shared[t] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) shared[t] += shared[t + half];
    __syncthreads();
  }
  return shared[0];
}

// Maximum of v over the block (same contract as block_sum).
__device__ inline float block_max(float v, float* shared) {
  const unsigned t = threadIdx.x;
  __syncthreads();
  shared[t] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) shared[t] = fmaxf(shared[t], shared[t + half]);
    __syncthreads();
  }
  return shared[0];
}

}  // namespace hippo::kernels::cuda
