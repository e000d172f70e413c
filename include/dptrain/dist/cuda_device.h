#pragma once
// The CUDA device a flag names (`--gpu N`, DataParallel's `--gpus`), checked against the devices
// this process sees before anything is moved there. LibTorch refuses a wrong index only at the
// first tensor, in several lines that name neither the flag nor what is visible ("invalid device
// ordinal"; a LibTorch without CUDA lists every backend it has).
//
//   const torch::Device device = dpt::dist::cuda_device(*flags.gpu, "--gpu");

#include <string>

#include <torch/types.h>

namespace dpt::dist {

// ConfigError unless 0 <= index < visible; `flag` starts the message ("--gpu", "rank 3: --gpu").
torch::Device cuda_device(int index, const std::string& flag, int visible);

// The same against the devices this process sees (CUDA_VISIBLE_DEVICES respected).
torch::Device cuda_device(int index, const std::string& flag);

}  // namespace dpt::dist
