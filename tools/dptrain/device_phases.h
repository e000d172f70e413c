#pragma once
// The device's own time for each phase of a step on a GPU. An event enters the device's current
// stream where each phase ends, so a phase's time is the span of its kernels on the device, which
// the host's clock cannot see: its launches run ahead. bench-models reports them beside the Python
// peer's torch.cuda.Event times of the same phases (bench/gpu), so that a gap between the two
// sides shows in which phase it lies. Nothing is reported where LibTorch cannot time events.
//
//   DevicePhases phases(device);
//   phases.start();
//   forward();
//   phases.end("forward");
//   backward();
//   phases.end("backward");
//   synchronize();
//   for (const auto& [name, ms] : phases.read()) ...

#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <string>
#include <utility>
#include <vector>

namespace dpt::cli {

class DevicePhases {
 public:
  explicit DevicePhases(c10::Device device) : device_(device) {}

  // Marks the start of the first phase, dropping the marks of an earlier step.
  void start();
  // Marks the end of `phase`, which is also the start of the next one.
  void end(std::string phase);
  // Once the device has run every marked kernel: each phase's milliseconds, in order; empty where
  // events cannot be timed.
  std::vector<std::pair<std::string, double>> read() const;

 private:
  void mark(std::string phase);

  c10::Device device_;
  std::vector<std::pair<std::string, c10::Event>> marks_;  // the first is the start, unnamed
};

}  // namespace dpt::cli
