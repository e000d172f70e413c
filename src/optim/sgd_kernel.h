#pragma once
// The elementwise update of FusedSGD (fused_sgd.h), on flat float arrays.

#include <cstdint>

namespace dpt::optim {

// The hyper-parameters as LibTorch's kernels see them: each double rounded once to float.
struct SgdElementwise {
  float lr = 0;
  float weight_decay = 0;
  float momentum = 0;      // 0: no buffer
  float gradient_share = 1;  // 1 - dampening: the new gradient's weight in the buffer
  bool nesterov = false;
  bool first = false;  // the buffer is written, not read (its first step)
};

// Whether this CPU runs sgd_update_fused with the rounding LibTorch's kernels use (FMA).
bool sgd_update_fused_available();

// One SGD step of n elements: `param` and `buffer` (null when momentum is 0) updated in place.
void sgd_update_fused(float* param, const float* grad, float* buffer, int64_t n, const SgdElementwise& step);

}  // namespace dpt::optim
