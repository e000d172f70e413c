#pragma once
// LibTorch's own errors, reported as dptrain reports its own: one line, and what to do where the
// message says what went wrong (memory that ran out, images too small for the model, a batch of
// one image at a BatchNorm whose input is 1x1). LibTorch 1.13 puts its stack of 30-odd frames
// into every message; it is shown only when TORCH_SHOW_CPP_STACKTRACES=1 asks for it, as PyTorch
// shows it.

#include <c10/util/Exception.h>

#include <string>

#include "dptrain/common/environment.h"

namespace dpt::cli {

std::string describe_torch_error(const c10::Error& error, const Environment& env);

}  // namespace dpt::cli
