#pragma once
// Which communication hook DistributedDataParallel reduces with, as a value the command line and
// the trainer's options carry (`dptrain train --comm-hook powersgd --powersgd-rank 4`):
//
//   std::shared_ptr<dpt::PowerSGDState> state;   // set when the hook is PowerSGD
//   ddp.register_comm_hook(dpt::make_comm_hook(options, &state));

#include <memory>
#include <string>

#include <torch/arg.h>

#include "dptrain/parallel/comm_hooks.h"
#include "dptrain/parallel/powersgd.h"

namespace dpt {

enum class CommHookKind {
  Allreduce,  // the mean in the gradients' dtype (PyTorch DDP's default)
  Fp16,       // comm_hooks::fp16_compress
  Bf16,       // comm_hooks::bf16_compress
  PowerSGD,   // comm_hooks::powersgd
};
// "allreduce", "fp16", "bf16", "powersgd"; parse throws ConfigError listing them.
std::string to_string(CommHookKind kind);
CommHookKind parse_comm_hook_kind(const std::string& name);

struct CommHookOptions {
  TORCH_ARG(CommHookKind, kind) = CommHookKind::Allreduce;
  // Kind PowerSGD: its rank, start and the rest.
  TORCH_ARG(PowerSGDOptions, powersgd) = {};
};

// The hook `options` name. For PowerSGD, its new state is also put in `*powersgd` (when given), for
// checkpoints and reports.
CommHook make_comm_hook(const CommHookOptions& options, std::shared_ptr<PowerSGDState>* powersgd = nullptr);

}  // namespace dpt
