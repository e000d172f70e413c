#pragma once
// Whether a checkpoint's state holds a NaN or an infinity, and where: such a state can only resume
// a run that has diverged, and the file it would replace may be the last one worth resuming.

#include <optional>
#include <string>

#include <ATen/core/ivalue.h>

namespace dpt::train {

// The path of the first floating-point tensor in `state` holding NaN or an infinity
// ("state_dict/fc.weight", "optimizer/state/3/momentum_buffer"), or nothing when all are finite.
// Dict keys and list positions name the steps; integer tensors are not read.
std::optional<std::string> first_non_finite_tensor(const c10::IValue& state);

}  // namespace dpt::train
