// The body of the CPU optimizer updates (cpu_optimizer.h): plain loops, one per variant so that
// each is a straight loop the compiler vectorizes for the instruction set of the file that
// includes this one.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu_optimizer.h"

namespace hippo::kernels::cpu::impl {

inline void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdParams& hp) {
  const float lr = hp.lr, mu = hp.momentum, wd = hp.weight_decay;
  if (mu == 0) {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (hp.nesterov) {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * p[i];
      buf[i] = mu * buf[i] + d;
      p[i] -= lr * (d + mu * buf[i]);
    }
  } else {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) {
      buf[i] = mu * buf[i] + (g[i] + wd * p[i]);
      p[i] -= lr * buf[i];
    }
  }
}

inline void adam_update(float* p, const float* g, float* m, float* v, int64_t n,
                        const AdamParams& hp, float step, float inv_sqrt_bc2) {
  const float lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  if (hp.decoupled) {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) {
      const float grad = g[i];
      p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1.0f - b1) * grad;
      v[i] = b2 * v[i] + (1.0f - b2) * grad * grad;
      p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  } else {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) {
      const float grad = g[i] + wd * p[i];
      m[i] = b1 * m[i] + (1.0f - b1) * grad;
      v[i] = b2 * v[i] + (1.0f - b2) * grad * grad;
      p[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  }
}

}  // namespace hippo::kernels::cpu::impl
