#include "dptrain/train/logs/step_phase.h"

namespace dpt::train {

const std::vector<StepPhase>& step_phases() {
  static const std::vector<StepPhase> phases = {
      StepPhase::Data,        StepPhase::CopyToDevice,     StepPhase::Forward,   StepPhase::Backward,
      StepPhase::WaitForCommunication, StepPhase::Synchronize, StepPhase::MetricsAllReduce, StepPhase::Optimizer};
  return phases;
}

std::string_view name_of(StepPhase phase) {
  switch (phase) {
    case StepPhase::Data: return "data";
    case StepPhase::CopyToDevice: return "copy to device";
    case StepPhase::Forward: return "forward";
    case StepPhase::Backward: return "backward";
    case StepPhase::WaitForCommunication: return "wait for communication";
    case StepPhase::Synchronize: return "synchronize";
    case StepPhase::MetricsAllReduce: return "metrics all-reduce";
    case StepPhase::Optimizer: return "optimizer";
  }
  return "unknown";
}

std::optional<StepPhase> step_phase_named(std::string_view name) {
  for (StepPhase phase : step_phases()) {
    if (name_of(phase) == name) return phase;
  }
  return std::nullopt;
}

}  // namespace dpt::train
