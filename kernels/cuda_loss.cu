// Softmax cross-entropy, the count of correct predictions and the sum of a buffer, as CUDA
// kernels. Every reduction is a fixed tree over a block whose size depends only on the problem's
// shape, so the bits never depend on timing.
#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

// One block per row: the row's maximum, then the sum of exponentials, each a block reduction.
__global__ void softmax_cross_entropy_kernel(const float* logits, const int32_t* labels,
                                             int classes, float* losses, float* dlogits,
                                             float grad_scale, int32_t* bad_index) {
  __shared__ float shared[kBlock];
  const int64_t r = blockIdx.x;
  const float* z = logits + r * classes;
  float* d = dlogits ? dlogits + r * classes : nullptr;
  const int32_t label = labels[r];
  if (label < 0 || label >= classes) {  // the same for the whole block: no barrier is skipped
    if (threadIdx.x == 0) {
      losses[r] = NAN;
      record_bad_index(bad_index, r, label, classes, kBadLabel);
    }
    if (d)
      for (int j = threadIdx.x; j < classes; j += blockDim.x) d[j] = NAN;
    return;
  }
  float m = -INFINITY;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, shared);
  float total = 0;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) total += expf(z[j] - m);
  total = block_sum(total, shared);
  if (threadIdx.x == 0) losses[r] = logf(total) - (z[label] - m);
  if (d == nullptr) return;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    float g = grad_scale * (expf(z[j] - m) / total);
    if (j == label) g -= grad_scale;
    d[j] = g;
  }
}

// One block: each thread takes rows t, t + blockDim.x, ...; the counts are added as a tree.
__global__ void count_correct_kernel(const float* logits, const int32_t* labels, int batch,
                                     int classes, int64_t* correct, int32_t* bad_index) {
  __shared__ long long shared[kBlock];
  long long count = 0;
  for (int r = threadIdx.x; r < batch; r += blockDim.x) {
    const int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      record_bad_index(bad_index, r, label, classes, kBadLabel);
      continue;
    }
    const float* z = logits + int64_t{r} * classes;
    int best = 0;  // the first maximum, as std::max_element finds it
    for (int j = 1; j < classes; ++j)
      if (z[j] > z[best]) best = j;
    count += best == label;
  }
  count = block_sum(count, shared);
  if (threadIdx.x == 0) *correct = count;
}

// Pass 1: block b sums elements b * blockDim.x + t + k * (gridDim.x * blockDim.x) into
// partials[b]; pass 2: one block sums the partials. The grid size depends on n only.
__global__ void sum_partials_kernel(const float* x, int64_t n, double* partials) {
  __shared__ double shared[kBlock];
  double s = 0;
  HIPPO_GRID_STRIDE(i, n) s += x[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_final_kernel(const double* partials, int count, double* total) {
  __shared__ double shared[kBlock];
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *total = s;
}

// Threads per block for a row of `classes` values: a power of two in [32, kBlock].
unsigned row_block(int classes) {
  unsigned threads = 32;
  while (threads < kBlock && threads < static_cast<unsigned>(classes)) threads *= 2;
  return threads;
}

}  // namespace

void softmax_cross_entropy(cudaStream_t stream, const float* logits, const int32_t* labels,
                           int batch, int classes, float* losses, float* dlogits, float grad_scale,
                           int32_t* bad_index) {
  if (batch == 0) return;
  softmax_cross_entropy_kernel<<<static_cast<unsigned>(batch), row_block(classes), 0, stream>>>(
      logits, labels, classes, losses, dlogits, grad_scale, bad_index);
  HIPPO_CUDA_CHECK_LAUNCH("softmax_cross_entropy_kernel");
}

void count_correct(cudaStream_t stream, const float* logits, const int32_t* labels, int batch,
                   int classes, int64_t* correct, int32_t* bad_index) {
  count_correct_kernel<<<1, kBlock, 0, stream>>>(logits, labels, batch, classes, correct,
                                                 bad_index);
  HIPPO_CUDA_CHECK_LAUNCH("count_correct_kernel");
}

void sum(cudaStream_t stream, const float* x, int64_t n, double* partials, double* total) {
  const unsigned blocks = std::min<unsigned>(grid_for(n), kSumPartials);
  sum_partials_kernel<<<blocks, kBlock, 0, stream>>>(x, n, partials);
  HIPPO_CUDA_CHECK_LAUNCH("sum_partials_kernel");
  sum_final_kernel<<<1, kBlock, 0, stream>>>(partials, static_cast<int>(blocks), total);
  HIPPO_CUDA_CHECK_LAUNCH("sum_final_kernel");
}

}  // namespace hippo::kernels::cuda
