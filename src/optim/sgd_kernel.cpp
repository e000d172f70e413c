#include "sgd_kernel.h"

#include <cmath>

namespace dpt::optim {

#if defined(__x86_64__) && defined(__GNUC__)
#define DPT_SGD_TARGET __attribute__((target("avx2,fma")))
#else
#define DPT_SGD_TARGET
#endif

namespace {

// The operations, in LibTorch's order and rounding (per element, as its vectorised kernels):
//   d = grad + weight_decay * param          add(alpha):  one FMA
//   b = b * momentum                         mul(scalar): rounded
//   b = b + (1 - dampening) * d              add(alpha):  one FMA   (first step: b = d)
//   d = nesterov ? d + momentum * b : b      add(alpha):  one FMA
//   param = param + (-lr) * d                add(alpha):  one FMA
// The loops are written per case so that each compiles to straight vector code.
DPT_SGD_TARGET void update(float* __restrict param, const float* __restrict grad, float* __restrict buffer,
                           int64_t n, const SgdElementwise& s) {
  const float minus_lr = -s.lr, decay = s.weight_decay, momentum = s.momentum, keep = s.gradient_share;
  // Without decay LibTorch takes the gradient as it is (0 x an infinite weight would be NaN).
  // A loop-invariant test: the compiler splits each loop in two.
  const bool decays = decay != 0;
  if (buffer == nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      param[i] = std::fma(decays ? std::fma(param[i], decay, grad[i]) : grad[i], minus_lr, param[i]);
    }
    return;
  }
  if (s.first) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = decays ? std::fma(param[i], decay, grad[i]) : grad[i];
      buffer[i] = d;
      param[i] = std::fma(s.nesterov ? std::fma(d, momentum, d) : d, minus_lr, param[i]);
    }
    return;
  }
  if (s.nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = decays ? std::fma(param[i], decay, grad[i]) : grad[i];
      const float b = std::fma(d, keep, buffer[i] * momentum);
      buffer[i] = b;
      param[i] = std::fma(std::fma(b, momentum, d), minus_lr, param[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float d = decays ? std::fma(param[i], decay, grad[i]) : grad[i];
    const float b = std::fma(d, keep, buffer[i] * momentum);
    buffer[i] = b;
    param[i] = std::fma(b, minus_lr, param[i]);
  }
}

}  // namespace

bool sgd_update_fused_available() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;  // std::fma would be a library call per element: slower than LibTorch's kernels
#endif
}

void sgd_update_fused(float* param, const float* grad, float* buffer, int64_t n, const SgdElementwise& step) {
  update(param, grad, buffer, n, step);
}

}  // namespace dpt::optim
