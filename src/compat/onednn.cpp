#include "dptrain/compat/onednn.h"

#include <ATen/Context.h>

#include <filesystem>

#include "dptrain/compat/compat.h"

namespace dpt::compat {

std::optional<std::string> avoid_onednn_where_it_cannot_plan() {
#if defined(__linux__) && TORCH_VERSION_MAJOR >= 2
  // Linux lists the caches from the same CPUID leaves: no list, no topology for oneDNN either.
  std::error_code ignored;
  if (std::filesystem::exists("/sys/devices/system/cpu/cpu0/cache/index0", ignored) ||
      !at::globalContext().userEnabledMkldnn()) {
    return std::nullopt;
  }
  at::globalContext().setUserEnabledMkldnn(false);
  return std::string(
      "this machine hides its caches' topology from CPUID (no /sys/devices/system/cpu/cpu0/cache, as some virtual "
      "machines), where LibTorch's oneDNN divides by zero planning a convolution: oneDNN is off in this process and "
      "LibTorch's own convolutions run, slower (channels_last and bf16 most of all); a machine that shows its "
      "caches runs them at full speed");
#else
  return std::nullopt;
#endif
}

}  // namespace dpt::compat
