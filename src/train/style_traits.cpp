#include "dptrain/train/style_traits.h"

#include <vector>

#include "dptrain/common/error.h"
#include "parallel_style.h"

namespace dpt::train {

std::string to_string(StyleFlag flag) {
  switch (flag) {
    case StyleFlag::Zero: return "--zero";
    case StyleFlag::Buckets:
      return "--bucket-cap-mb, --first-bucket-cap-mb, --last-bucket-cap-mb and --find-unused-parameters";
    case StyleFlag::ParameterServer: return "--ps-servers, --ps-sync, --ps-async and --ps-staleness";
    case StyleFlag::Replicas: return "--replicas and --gpus";
    case StyleFlag::SyncBn: return "--sync-bn";
    case StyleFlag::Amp: return "--amp";
    case StyleFlag::AccumSteps: return "--accum-steps";
    case StyleFlag::ClipGradNorm: return "--clip-grad-norm";
    case StyleFlag::CommHook: return "--comm-hook";
  }
  return "?";
}

namespace {

constexpr ParallelMode kModes[] = {ParallelMode::Ddp, ParallelMode::Dp, ParallelMode::Hvd, ParallelMode::Ps};

// "ddp", "ddp and ps", "ddp, dp and ps": the modes whose style takes `flag`.
std::string modes_taking(StyleFlag flag) {
  std::vector<std::string> names;
  for (const ParallelMode mode : kModes) {
    if (style_traits(mode).accepts(flag)) names.push_back(to_string(mode));
  }
  std::string text;
  for (size_t k = 0; k < names.size(); ++k) text += (k == 0 ? "" : k + 1 == names.size() ? " and " : ", ") + names[k];
  return text;
}

}  // namespace

std::string StyleTraits::refusal(StyleFlag flag) const {
  const std::string modes = "--mode " + modes_taking(flag);
  switch (flag) {
    case StyleFlag::Zero:
      return str("--zero needs ", modes, ": the other styles keep their optimizer whole (hvd, dp) or on the servers "
                 "(ps)");
    case StyleFlag::Buckets:
      return str(to_string(flag), " belong to ", modes,
                 " (--mode hvd fuses tensors as Horovod does; --mode dp has no buckets)");
    case StyleFlag::ParameterServer:
    case StyleFlag::Replicas: return str(to_string(flag), " belong to ", modes);
    case StyleFlag::CommHook:
      return str("--comm-hook needs ", modes, ": it reduces DistributedDataParallel's buckets (--mode hvd and dp "
                 "reduce without them, the parameter servers take whole gradients)");
    default: return str(to_string(flag), " needs ", modes, "; --mode ", to_string(mode()), " does not take it");
  }
}

const StyleTraits& style_traits(ParallelMode mode) { return style_kind(mode); }

void check_style_options(const TrainOptions& o) {
  const StyleTraits& style = style_traits(o.parallel().mode());
  const std::pair<StyleFlag, bool> used[] = {
      {StyleFlag::Zero, o.parallel().zero_stage() != 0},
      {StyleFlag::Replicas, o.parallel().replicas().has_value() || !o.parallel().gpus().empty()},
      {StyleFlag::SyncBn, o.parallel().sync_bn()},
      {StyleFlag::Amp, o.amp()},
      {StyleFlag::AccumSteps, o.accum_steps() > 1},
      {StyleFlag::ClipGradNorm, o.optimizer().clip_grad_norm().has_value()},
      {StyleFlag::CommHook, o.parallel().comm_hook().kind() != CommHookKind::Allreduce},
  };
  for (const auto& [flag, in_use] : used) {
    DPT_CHECK(!in_use || style.accepts(flag), ConfigError, style.refusal(flag));
  }
  style.check(o);
}

}  // namespace dpt::train
