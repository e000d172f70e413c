#include "dptrain/dist/cuda_device.h"

#include <torch/cuda.h>

#include "dptrain/common/error.h"

namespace dpt::dist {

torch::Device cuda_device(int index, const std::string& flag, int visible) {
  DPT_CHECK(visible > 0, ConfigError, flag, " ", index, ": this process sees no CUDA device (a LibTorch built without ",
            "CUDA, no driver, or an empty CUDA_VISIBLE_DEVICES); leave the flag out to run on the CPU");
  DPT_CHECK(index >= 0 && index < visible, ConfigError, flag, " ", index, ": no such GPU in this process, which sees ",
            visible, " (", visible == 1 ? "index 0" : str("indices 0 to ", visible - 1),
            ", numbered after CUDA_VISIBLE_DEVICES); name one of those");
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(index)};
}

torch::Device cuda_device(int index, const std::string& flag) {
  return cuda_device(index, flag, static_cast<int>(torch::cuda::device_count()));
}

}  // namespace dpt::dist
