#include "device_phases.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "dptrain/compat/compat.h"

namespace dpt::cli {

void DevicePhases::start() {
  marks_.clear();
  marks_.reserve(4);  // a step's start and its three phases: one allocation, made before the first event
  mark("");
}

void DevicePhases::end(std::string phase) { mark(std::move(phase)); }

void DevicePhases::mark(std::string phase) {
  // BACKEND_DEFAULT: CUDA's timing events (PyTorch's default turns timing off).
  marks_.emplace_back(std::move(phase), c10::Event(device_.type(), c10::EventFlag::BACKEND_DEFAULT));
  marks_.back().second.record(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
}

std::vector<std::pair<std::string, double>> DevicePhases::read() const {
  std::vector<std::pair<std::string, double>> phases;
  for (size_t i = 1; i < marks_.size(); ++i) {
    const auto ms = compat::elapsed_ms(marks_[i - 1].second, marks_[i].second);
    if (!ms) return {};
    phases.emplace_back(marks_[i].first, *ms);
  }
  return phases;
}

}  // namespace dpt::cli
