#pragma once
// What mixed precision (--amp) computes in on each device, for `dptrain train` and what times its
// step (`dptrain bench-models`): fp16 autocast on a GPU, whose narrow range needs loss scaling
// (GradScaler), and bf16 autocast elsewhere, whose float32 range does not.
//
//   compat::AutocastGuard autocast(device.type(), dpt::optim::amp_dtype(device), amp);

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace dpt::optim {

inline at::ScalarType amp_dtype(const c10::Device& device) { return device.is_cuda() ? at::kHalf : at::kBFloat16; }

inline bool amp_needs_loss_scaling(const c10::Device& device) { return amp_dtype(device) == at::kHalf; }

}  // namespace dpt::optim
