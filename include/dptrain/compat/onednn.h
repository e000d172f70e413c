#pragma once
// oneDNN 3.x, which runs LibTorch 2.x's CPU convolutions, plans a convolution with the number of
// cores that share each cache level, read from CPUID. Where a virtual machine hides the caches'
// topology (CPUID leaf 0x8000001D empty on AMD, leaf 4 on Intel, and so no
// /sys/devices/system/cpu/cpu0/cache) it divides by zero, and the process dies of SIGFPE, or it
// computes wrong results: with LibTorch 2.6 on a Zen 5 VM, channels_last convolutions crashed and
// torchvision's convolutions gave gradients 1.5e-2 to 0.67 off LibTorch's own (peer
// test_models_oracle), both right again with oneDNN off. oneDNN 2.x (LibTorch 1.13) plans without it.
//
//   dpt::compat::avoid_onednn_where_it_cannot_plan();                  // at a program's start
//   if (auto why = dpt::compat::onednn_cannot_plan_here()) log << "warning: " << *why;

#include <optional>
#include <string>

namespace dpt::compat {

// Why this process's LibTorch cannot trust oneDNN here, for a warning; nothing where it can.
std::optional<std::string> onednn_cannot_plan_here();

// Turns LibTorch's use of oneDNN off for this process where onednn_cannot_plan_here() says so:
// LibTorch's own convolutions run instead, slower.
void avoid_onednn_where_it_cannot_plan();

}  // namespace dpt::compat
