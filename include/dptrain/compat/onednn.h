#pragma once
// oneDNN 3.x, which runs LibTorch 2.x's CPU convolutions, plans a convolution with the number of
// cores that share each cache level, read from CPUID; where a virtual machine hides the caches'
// topology (CPUID leaf 0x8000001D empty on AMD, leaf 4 on Intel, and so no
// /sys/devices/system/cpu/cpu0/cache) it divides by zero and the process dies of SIGFPE: LibTorch
// 2.6 on a Zen 5 VM, channels_last convolutions and torchvision's backward alike. oneDNN 2.x
// (LibTorch 1.13) plans without it. There, LibTorch's own convolutions are the ones that run.
//
//   if (auto why = dpt::compat::avoid_onednn_where_it_cannot_plan()) std::cerr << "warning: " << *why << "\n";

#include <optional>
#include <string>

namespace dpt::compat {

// Turns LibTorch's use of oneDNN off for this process where it would crash as above, and says why;
// nothing elsewhere.
std::optional<std::string> avoid_onednn_where_it_cannot_plan();

}  // namespace dpt::compat
