#include "dptrain/parallel/comm_hook_options.h"

#include "dptrain/common/error.h"

namespace dpt {

namespace {
constexpr CommHookKind kKinds[] = {CommHookKind::Allreduce, CommHookKind::Fp16, CommHookKind::Bf16,
                                   CommHookKind::PowerSGD};
}  // namespace

std::string to_string(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::Allreduce: return "allreduce";
    case CommHookKind::Fp16: return "fp16";
    case CommHookKind::Bf16: return "bf16";
    case CommHookKind::PowerSGD: return "powersgd";
  }
  return "?";
}

CommHookKind parse_comm_hook_kind(const std::string& name) {
  for (const CommHookKind kind : kKinds) {
    if (to_string(kind) == name) return kind;
  }
  throw ConfigError(str("unknown communication hook '", name, "': allreduce, fp16, bf16 or powersgd"));
}

CommHook make_comm_hook(const CommHookOptions& options, std::shared_ptr<PowerSGDState>* powersgd) {
  switch (options.kind()) {
    case CommHookKind::Allreduce: return comm_hooks::allreduce_mean();
    case CommHookKind::Fp16: return comm_hooks::fp16_compress();
    case CommHookKind::Bf16: return comm_hooks::bf16_compress();
    case CommHookKind::PowerSGD: {
      auto state = std::make_shared<PowerSGDState>(options.powersgd());
      if (powersgd != nullptr) *powersgd = state;
      return comm_hooks::powersgd(std::move(state));
    }
  }
  DPT_ASSERT(false, "unhandled communication hook kind");
  return {};
}

}  // namespace dpt
