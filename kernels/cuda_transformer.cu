// Transformer operations as CUDA kernels: residual add, embeddings, layer normalization and
// causal self-attention (llm.c's layout, kernels.h). Gradients that sum over positions are
// gathers: the thread that owns an output value loops over the positions in ascending order, so
// there are no atomics and the bits never depend on timing. Sums within a row (layer norm's
// statistics, attention's softmax) are fixed block trees.
#include <cmath>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"
#include "kernels/cuda_transformer.cuh"

namespace hippo::kernels::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  HIPPO_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

// One thread per out[r, c], r = b T + t.
__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, const float* wpe,
                                         float* out, int64_t rows, int T, int C, int V,
                                         int32_t* bad_index) {
  HIPPO_GRID_STRIDE(i, rows * C) {
    const int64_t r = i / C, c = i % C;
    const int32_t token = tokens[r];
    if (token < 0 || token >= V) {
      if (c == 0) record_bad_index(bad_index, r, token, V, kBadToken);
      out[i] = NAN;
      continue;
    }
    out[i] = wte[int64_t{token} * C + c] + wpe[r % T * C + c];
  }
}

// dwpe[t, c] = sum over b ascending of dout[b, t, c]; one thread per value.
__global__ void embedding_backward_wpe_kernel(const float* dout, float* dwpe, int B, int T, int C) {
  HIPPO_GRID_STRIDE(i, int64_t{T} * C) {
    float sum = 0;
    for (int b = 0; b < B; ++b) sum += dout[int64_t{b} * T * C + i];
    dwpe[i] = sum;
  }
}

// dwte[v, c] for v = blockIdx.x and kBlock channels from blockIdx.y * kBlock: the block reads
// the tokens a chunk at a time into shared memory, and each thread adds, in ascending position
// order, the rows of dout whose token is v.
__global__ void embedding_backward_wte_kernel(const int32_t* tokens, const float* dout, float* dwte,
                                              int64_t rows, int C) {
  __shared__ int32_t chunk[kBlock];
  const int32_t v = static_cast<int32_t>(blockIdx.x);
  const int64_t c = int64_t{blockIdx.y} * blockDim.x + threadIdx.x;
  float sum = 0;
  for (int64_t start = 0; start < rows; start += blockDim.x) {
    __syncthreads();  // the previous chunk has been read by every thread
    if (start + threadIdx.x < rows) chunk[threadIdx.x] = tokens[start + threadIdx.x];
    __syncthreads();
    const int len = static_cast<int>(rows - start < blockDim.x ? rows - start : blockDim.x);
    if (c < C)
      for (int j = 0; j < len; ++j)
        if (chunk[j] == v) sum += dout[(start + j) * C + c];
  }
  if (c < C) dwte[int64_t{v} * C + c] = sum;
}

// One block per row r of x[N, C].
__global__ void layernorm_forward_kernel(const float* x, const float* weight, const float* bias,
                                         float* out, float* mean, float* rstd, int C) {
  __shared__ float shared[kBlock];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  float sum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
  const float m = block_sum(sum, shared) / C;
  float var = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) var += (xr[c] - m) * (xr[c] - m);
  const float s = 1.0f / sqrtf(block_sum(var, shared) / C + kLayerNormEps);
  float* o = out + r * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (xr[c] - m) * s * weight[c] + bias[c];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx (accumulated): one block per row.
__global__ void layernorm_backward_dx_kernel(const float* dout, const float* x, const float* weight,
                                             const float* mean, const float* rstd, float* dx,
                                             int C) {
  __shared__ float shared[kBlock];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  const float* g = dout + r * C;
  const float m = mean[r], s = rstd[r];
  float g_sum = 0, gx_sum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float gw = g[c] * weight[c];
    g_sum += gw;
    gx_sum += gw * ((xr[c] - m) * s);
  }
  const float g_mean = block_sum(g_sum, shared) / C;
  const float gx_mean = block_sum(gx_sum, shared) / C;
  float* d = dx + r * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    d[c] += s * (g[c] * weight[c] - g_mean - (xr[c] - m) * s * gx_mean);
}

// dweight, dbias (overwritten): block (32, kRows) owns 32 adjacent channels; thread (x, y) adds
// rows y, y + kRows, ... (reads coalesced along channels), then the kRows partial sums are added
// in a fixed tree.
constexpr int kRows = 16;
__global__ void layernorm_backward_params_kernel(const float* dout, const float* x,
                                                 const float* mean, const float* rstd,
                                                 float* dweight, float* dbias, int64_t N, int C) {
  __shared__ float dw[kRows][33], db[kRows][33];  // 33: no bank conflicts between rows
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0, sb = 0;
  if (c < C)
    for (int64_t r = threadIdx.y; r < N; r += kRows) {
      const float g = dout[r * C + c];
      sw += g * ((x[r * C + c] - mean[r]) * rstd[r]);
      sb += g;
    }
  dw[threadIdx.y][threadIdx.x] = sw;
  db[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  for (int half = kRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      dw[threadIdx.y][threadIdx.x] += dw[threadIdx.y + half][threadIdx.x];
      db[threadIdx.y][threadIdx.x] += db[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < C) {
    dweight[c] = dw[0][threadIdx.x];
    dbias[c] = db[0][threadIdx.x];
  }
}

// One block per query row (b, h, t): scores, softmax (block max and sum), then the output, one
// thread per channel of the head summing over u ascending.
__global__ void attention_forward_kernel(const float* qkv, float* out, float* att, int T, int C,
                                         int NH) {
  __shared__ float shared[kBlock];
  const int64_t row = blockIdx.x;
  const int64_t t = row % T, h = row / T % NH, b = row / T / NH;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t{C};
  const float* q = qkv + (b * T + t) * C3 + h * hs;
  const float* keys = qkv + b * T * C3 + C + h * hs;
  const float* values = qkv + b * T * C3 + 2 * C + h * hs;
  float* a = att + row * T;

  float max = -INFINITY;
  for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) {
    const float* k = keys + u * C3;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
    a[u] = dot * scale;
    max = fmaxf(max, a[u]);
  }
  max = block_max(max, shared);
  float total = 0;
  for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) {
    a[u] = expf(a[u] - max);
    total += a[u];
  }
  const float inv = 1.0f / block_sum(total, shared);
  for (int64_t u = threadIdx.x; u < T; u += blockDim.x) a[u] = u <= t ? a[u] * inv : 0.0f;
  __syncthreads();  // makes every thread's a[u] visible to the whole block
  float* o = out + (b * T + t) * C + h * hs;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    float sum = 0;
    for (int64_t u = 0; u <= t; ++u) sum += a[u] * values[u * C3 + i];
    o[i] = sum;
  }
}

// ds[t, u] = att[t, u] (datt[t, u] - sum_u' att[t, u'] datt[t, u']) with datt[t, u] =
// dout[t] . v[u], into scratch (0 for u > t); one block per row (b, h, t).
__global__ void attention_backward_ds_kernel(const float* dout, const float* qkv, const float* att,
                                             float* scratch, int T, int C, int NH) {
  __shared__ float shared[kBlock];
  const int64_t row = blockIdx.x;
  const int64_t t = row % T, h = row / T % NH, b = row / T / NH;
  const int hs = C / NH;
  const int64_t C3 = 3 * int64_t{C};
  const float* g = dout + (b * T + t) * C + h * hs;
  const float* values = qkv + b * T * C3 + 2 * C + h * hs;
  const float* a = att + row * T;
  float* ds = scratch + row * T;
  float weighted = 0;
  for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) {
    const float* v = values + u * C3;
    float dot = 0;
    for (int i = 0; i < hs; ++i) dot += g[i] * v[i];
    ds[u] = dot;
    weighted += a[u] * dot;
  }
  weighted = block_sum(weighted, shared);
  for (int64_t u = threadIdx.x; u < T; u += blockDim.x)
    ds[u] = u <= t ? a[u] * (ds[u] - weighted) : 0.0f;
}

// One thread per (b, h, position p, channel i of the head): dq[p] sums over u <= p, dk[p] and
// dv[p] over t >= p, each in ascending order.
__global__ void attention_backward_dqkv_kernel(const float* dout, const float* qkv,
                                               const float* att, const float* ds, float* dqkv,
                                               int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t{C};
  HIPPO_GRID_STRIDE(idx, int64_t{B} * NH * T * hs) {
    const int64_t i = idx % hs, p = idx / hs % T, h = idx / hs / T % NH, b = idx / hs / T / NH;
    const int64_t bh = b * NH + h;
    const float* base = qkv + b * T * C3 + h * hs;  // q of position 0, this head
    const float* ds_rows = ds + bh * T * T;         // ds[t, u] at t * T + u
    const float* att_rows = att + bh * T * T;
    float dq = 0, dk = 0, dv = 0;
    for (int64_t u = 0; u <= p; ++u) dq += (ds_rows[p * T + u] * scale) * base[u * C3 + C + i];
    for (int64_t t = p; t < T; ++t) {
      dk += (ds_rows[t * T + p] * scale) * base[t * C3 + i];
      dv += att_rows[t * T + p] * dout[(b * T + t) * C + h * hs + i];
    }
    float* d = dqkv + (b * T + p) * C3 + h * hs + i;
    d[0] = dq;
    d[C] = dk;
    d[2 * C] = dv;
  }
}

// Threads per block for a row of `n` values: a power of two in [32, kBlock].
unsigned row_block(int64_t n) {
  unsigned threads = 32;
  while (threads < kBlock && threads < n) threads *= 2;
  return threads;
}

}  // namespace

void add(cudaStream_t stream, const float* a, const float* b, float* y, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, y, n);
  HIPPO_CUDA_CHECK_LAUNCH("add_kernel");
}

void embedding_forward(cudaStream_t stream, const int32_t* tokens, const float* wte,
                       const float* wpe, float* out, int B, int T, int C, int V,
                       int32_t* bad_index) {
  const int64_t rows = int64_t{B} * T;
  if (rows * C == 0) return;
  embedding_forward_kernel<<<grid_for(rows * C), kBlock, 0, stream>>>(tokens, wte, wpe, out, rows,
                                                                      T, C, V, bad_index);
  HIPPO_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(cudaStream_t stream, const int32_t* tokens, const float* dout, float* dwte,
                        float* dwpe, int B, int T, int C, int V) {
  if (int64_t{T} * C > 0) {
    embedding_backward_wpe_kernel<<<grid_for(int64_t{T} * C), kBlock, 0, stream>>>(dout, dwpe, B, T,
                                                                                   C);
    HIPPO_CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
  }
  if (int64_t{V} * C > 0) {
    const dim3 grid(static_cast<unsigned>(V), static_cast<unsigned>((C + kBlock - 1) / kBlock));
    embedding_backward_wte_kernel<<<grid, kBlock, 0, stream>>>(tokens, dout, dwte, int64_t{B} * T,
                                                               C);
    HIPPO_CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  }
}

void layernorm_forward(cudaStream_t stream, const float* x, const float* weight, const float* bias,
                       float* out, float* mean, float* rstd, int64_t N, int C) {
  if (N == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), row_block(C), 0, stream>>>(
      x, weight, bias, out, mean, rstd, C);
  HIPPO_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

void layernorm_backward(cudaStream_t stream, const float* dout, const float* x, const float* weight,
                        const float* mean, const float* rstd, float* dx, float* dweight,
                        float* dbias, int64_t N, int C) {
  if (C == 0) return;
  if (N > 0) {
    layernorm_backward_dx_kernel<<<static_cast<unsigned>(N), row_block(C), 0, stream>>>(
        dout, x, weight, mean, rstd, dx, C);
    HIPPO_CUDA_CHECK_LAUNCH("layernorm_backward_dx_kernel");
  }
  layernorm_backward_params_kernel<<<static_cast<unsigned>((C + 31) / 32), dim3(32, kRows), 0,
                                     stream>>>(dout, x, mean, rstd, dweight, dbias, N, C);
  HIPPO_CUDA_CHECK_LAUNCH("layernorm_backward_params_kernel");
}

void attention_forward(cudaStream_t stream, const float* qkv, float* out, float* att, int B, int T,
                       int C, int NH) {
  const int64_t rows = int64_t{B} * NH * T;
  if (rows == 0) return;
  attention_forward_kernel<<<static_cast<unsigned>(rows), row_block(T), 0, stream>>>(qkv, out, att,
                                                                                     T, C, NH);
  HIPPO_CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

void attention_backward(cudaStream_t stream, const float* dout, const float* qkv, const float* att,
                        float* scratch, float* dqkv, int B, int T, int C, int NH) {
  const int64_t rows = int64_t{B} * NH * T;
  if (rows == 0) return;
  attention_backward_ds_kernel<<<static_cast<unsigned>(rows), row_block(T), 0, stream>>>(
      dout, qkv, att, scratch, T, C, NH);
  HIPPO_CUDA_CHECK_LAUNCH("attention_backward_ds_kernel");
  const int64_t n = int64_t{B} * T * C;  // B * NH * T * hs
  attention_backward_dqkv_kernel<<<grid_for(n), kBlock, 0, stream>>>(dout, qkv, att, scratch, dqkv,
                                                                     B, T, C, NH);
  HIPPO_CUDA_CHECK_LAUNCH("attention_backward_dqkv_kernel");
}

}  // namespace hippo::kernels::cuda
