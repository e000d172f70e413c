#pragma once
// The attainable rate of the math a training step is made of, on this machine: the best FLOP/s
// of matrix products and of convolutions (forward and backward, ResNet-50's shapes, channels_last)
// per unit that runs one rank's math (a CPU thread, or a GPU), for each precision the device runs.
// `dptrain bench-peak` measures and writes it; `dptrain train` reads it to report the fraction of
// it a run attains (model FLOP/s over the peak: MFU).
//
//   dptrain bench-peak                      # writes $XDG_CACHE_HOME/dptrain/peak.json
//   dptrain train ... --amp                 # progress lines then end in "TFLOP/s 0.47  MFU 56%"

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "dptrain/common/environment.h"

namespace dpt::cli {

struct PeakOptions {
  // Where to measure: the CPU on one thread, or a CUDA device.
  torch::Device device = torch::kCPU;
  // Seconds each kernel shape is timed for (after one unmeasured run).
  double seconds_per_kernel = 0.3;
};

// {"device", "cpu", "libtorch", "unit", "precisions": {"fp32": {"matmul", "conv", "peak"}, ...}}
// in FLOP/s per unit; the CPU measures fp32 and bf16, a GPU also fp16.
nlohmann::json measure_peak(const PeakOptions& options);

// $XDG_CACHE_HOME/dptrain/peak.json, else $HOME/.cache/dptrain/peak.json.
std::filesystem::path default_peak_file(const Environment& env);

// The peak FLOP/s per unit for `precision` ("fp32", "bf16", "fp16") on `device` from a file that
// bench-peak wrote on this machine (same CPU model and LibTorch); nullopt when there is none.
std::optional<double> measured_peak(const std::filesystem::path& file, const std::string& precision,
                                    const std::string& device);

}  // namespace dpt::cli
