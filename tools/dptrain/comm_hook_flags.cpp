#include "comm_hook_flags.h"

#include "dptrain/common/error.h"
#include "number_bounds.h"
#include "run_flags.h"

namespace dpt::cli {

void add_comm_hook_flags(CLI::App& app, CommHookOptions& hook) {
  add_parsed_option(app, "--comm-hook", hook.kind(), parse_comm_hook_kind,
                    "how each gradient bucket is reduced (--mode ddp): allreduce (the mean), fp16 or bf16 (the mean "
                    "sent at half the bytes), powersgd (each gradient matrix sent as a rank --powersgd-rank "
                    "approximation, with error feedback: far fewer bytes for slow links; docs/ethernet.md)")
      ->default_str(to_string(hook.kind()));
  PowerSGDOptions& powersgd = hook.powersgd();
  app.add_option("--powersgd-rank", powersgd.matrix_approximation_rank(),
                 "--comm-hook powersgd: the rank of each gradient's approximation (1-4 suit most image models; "
                 "higher sends more and is more exact)")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--powersgd-start-iter", powersgd.start_iter(),
                 "--comm-hook powersgd: optimizer steps of plain allreduce before compression begins (early "
                 "training is sensitive to the approximation)")
      ->check(at_least(0))
      ->capture_default_str();
}

void check_comm_hook_flags(const CLI::App& app, const CommHookOptions& hook) {
  for (const char* name : {"--powersgd-rank", "--powersgd-start-iter"}) {
    DPT_CHECK(app.count(name) == 0 || hook.kind() == CommHookKind::PowerSGD, ConfigError, name,
              " belongs to --comm-hook powersgd");
  }
}

}  // namespace dpt::cli
