#include "dptrain/compat/onednn.h"

#include <ATen/Context.h>

#include <filesystem>

#include "dptrain/compat/compat.h"

namespace dpt::compat {

std::optional<std::string> onednn_cannot_plan_here() {
#if defined(__linux__) && TORCH_VERSION_MAJOR >= 2
  // Linux lists the caches from the same CPUID leaves: no list, no topology for oneDNN either.
  std::error_code ignored;
  if (std::filesystem::exists("/sys/devices/system/cpu/cpu0/cache/index0", ignored)) return std::nullopt;
  return std::string(
      "this machine hides its caches' topology from CPUID (no /sys/devices/system/cpu/cpu0/cache, as some virtual "
      "machines), where LibTorch's oneDNN crashes or miscomputes convolutions: it is off, and LibTorch's own "
      "convolutions run, slower (channels_last and bf16 most of all); a machine that shows its caches runs at full "
      "speed");
#else
  return std::nullopt;
#endif
}

void avoid_onednn_where_it_cannot_plan() {
  if (onednn_cannot_plan_here()) at::globalContext().setUserEnabledMkldnn(false);
}

}  // namespace dpt::compat
