#include "dptrain/dist/cuda_device.h"

#include <gtest/gtest.h>

#include <string>

#include <torch/cuda.h>

#include "dptrain/common/error.h"

using dpt::ConfigError;
using dpt::dist::cuda_device;

namespace {

std::string config_error(int index, int visible) {
  try {
    cuda_device(index, "rank 1: --gpu", visible);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(CudaDevice, AVisibleIndexIsThatDevice) {
  EXPECT_EQ(cuda_device(0, "--gpu", 1), torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(cuda_device(3, "--gpu", 4), torch::Device(torch::kCUDA, 3));
}

TEST(CudaDevice, AnIndexPastTheVisibleOnesNamesTheFlagAndTheRange) {
  EXPECT_EQ(config_error(7, 1), "rank 1: --gpu 7: no such GPU in this process, which sees 1 (index 0, numbered "
                                "after CUDA_VISIBLE_DEVICES); name one of those");
  EXPECT_EQ(config_error(2, 2), "rank 1: --gpu 2: no such GPU in this process, which sees 2 (indices 0 to 1, "
                                "numbered after CUDA_VISIBLE_DEVICES); name one of those");
  EXPECT_NE(config_error(-1, 2).find("--gpu -1: no such GPU"), std::string::npos);
}

TEST(CudaDevice, NoVisibleDeviceSaysSoForAnyIndex) {
  for (int index : {0, 1}) {
    EXPECT_NE(config_error(index, 0).find(": this process sees no CUDA device"), std::string::npos) << index;
  }
}

// Past the devices of this process, whatever it sees: a CPU-only LibTorch sees none.
TEST(CudaDevice, ThisProcessRefusesTheIndexPastItsDevices) {
  const int visible = static_cast<int>(torch::cuda::device_count());
  EXPECT_THROW(cuda_device(visible, "--gpu"), ConfigError);
  if (visible > 0) {
    EXPECT_EQ(cuda_device(visible - 1, "--gpu").index(), visible - 1);
  }
}
