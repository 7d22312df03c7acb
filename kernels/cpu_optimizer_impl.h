// The body of the CPU optimizer updates (cpu_optimizer.h): plain loops, one per variant so that
// each is a straight loop the compiler vectorizes for the instruction set of the file that
// includes this one.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu_optimizer.h"

namespace hippo::kernels::cpu::impl {

// One SGD step (kernels.h's sgd_update) of a parameter p with gradient g and momentum buffer value
// buf (untouched without momentum): the one order of float operations that every instruction set
// and the fused product epilogue (cpu_gemm_impl.h) share. V is float or a GCC vector of floats
// (operators per lane, a scalar operand broadcast; no fused multiply-adds: -ffp-contract=off).
enum class SgdKind { kPlain, kMomentum, kNesterov };

inline SgdKind sgd_kind(const SgdParams& hp) {
  return hp.momentum == 0 ? SgdKind::kPlain : hp.nesterov ? SgdKind::kNesterov : SgdKind::kMomentum;
}

template <SgdKind kKind, class V>
inline void sgd_step(V& p, V& buf, V g, const SgdParams& hp) {
  const float lr = hp.lr, mu = hp.momentum, wd = hp.weight_decay;
  const V d = g + wd * p;
  if constexpr (kKind == SgdKind::kPlain) {
    p -= lr * d;
  } else {
    buf = mu * buf + d;
    p -= lr * (kKind == SgdKind::kNesterov ? d + mu * buf : buf);
  }
}

// sgd_step over n values: a straight loop that the compiler vectorizes (with a local copy of the
// settings, which stores to p and buf cannot alias).
template <SgdKind kKind>
inline void sgd_loop(float* p, const float* g, float* buf, int64_t n, const SgdParams& settings) {
  const SgdParams hp = settings;
  if constexpr (kKind == SgdKind::kPlain) {
    float unused = 0;
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) sgd_step<kKind>(p[i], unused, g[i], hp);
  } else {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) sgd_step<kKind>(p[i], buf[i], g[i], hp);
  }
}

inline void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdParams& hp) {
  switch (sgd_kind(hp)) {
    case SgdKind::kPlain:
      return sgd_loop<SgdKind::kPlain>(p, g, buf, n, hp);
    case SgdKind::kMomentum:
      return sgd_loop<SgdKind::kMomentum>(p, g, buf, n, hp);
    case SgdKind::kNesterov:
      break;
  }
  sgd_loop<SgdKind::kNesterov>(p, g, buf, n, hp);
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
