// The optimizer updates as CUDA kernels: one fused kernel per optimizer over the whole parameter
// buffer (gradient, weight decay, moments and parameter in one pass), with the same formulas as
// the CPU backend (kernels.h).
#include <cmath>
#include <stdexcept>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, SgdParams hp) {
  const float lr = hp.lr, mu = hp.momentum, wd = hp.weight_decay;
  HIPPO_GRID_STRIDE(i, n) {
    const float d = g[i] + wd * p[i];
    if (mu == 0) {
      p[i] -= lr * d;
    } else {
      const float b = mu * buf[i] + d;
      buf[i] = b;
      p[i] -= lr * (hp.nesterov ? d + mu * b : b);
    }
  }
}

// step = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t), computed on the host in double
// as the CPU backend does.
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamParams hp,
                            float step, float inv_sqrt_bc2) {
  HIPPO_GRID_STRIDE(i, n) {
    float grad = g[i];
    if (hp.decoupled)
      p[i] -= hp.lr * hp.weight_decay * p[i];
    else
      grad += hp.weight_decay * p[i];
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * grad;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) * inv_sqrt_bc2 + hp.eps);
  }
}

}  // namespace

void sgd_update(cudaStream_t stream, float* params, const float* grads, float* buf, int64_t n,
                const SgdParams& hp) {
  if (hp.momentum != 0 && buf == nullptr)
    throw std::invalid_argument("sgd_update: momentum needs a buffer");
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kBlock, 0, stream>>>(params, grads, buf, n, hp);
  HIPPO_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void adam_update(cudaStream_t stream, float* params, const float* grads, float* m, float* v,
                 int64_t n, const AdamParams& hp) {
  if (hp.t < 1) throw std::invalid_argument("adam_update: t must be >= 1");
  if (n == 0) return;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double{hp.beta1}, double(hp.t)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double{hp.beta2}, double(hp.t)));
  adam_kernel<<<grid_for(n), kBlock, 0, stream>>>(params, grads, m, v, n, hp, hp.lr / bc1,
                                                  1.0f / std::sqrt(bc2));
  HIPPO_CUDA_CHECK_LAUNCH("adam_kernel");
}

}  // namespace hippo::kernels::cuda
