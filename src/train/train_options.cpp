#include "dptrain/train/train_options.h"

#include "dptrain/common/error.h"

namespace dpt::train {

ParallelMode parse_parallel_mode(const std::string& name) {
  if (name == "ddp") return ParallelMode::Ddp;
  if (name == "dp") return ParallelMode::Dp;
  if (name == "hvd") return ParallelMode::Hvd;
  if (name == "ps") return ParallelMode::Ps;
  DPT_CHECK(false, ConfigError, "unknown --mode '", name, "'; use ddp, dp, hvd or ps");
  return ParallelMode::Ddp;
}

std::string to_string(ParallelMode mode) {
  switch (mode) {
    case ParallelMode::Ddp:
      return "ddp";
    case ParallelMode::Dp:
      return "dp";
    case ParallelMode::Hvd:
      return "hvd";
    case ParallelMode::Ps:
      return "ps";
  }
  return "?";
}

}  // namespace dpt::train
