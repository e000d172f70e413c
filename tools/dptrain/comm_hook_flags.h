#pragma once
// --comm-hook and PowerSGD's flags, shared by `dptrain train` and `dptrain bench-ddp`.

#include <CLI/CLI.hpp>

#include "dptrain/parallel/comm_hook_options.h"

namespace dpt::cli {

// Binds --comm-hook, --powersgd-rank and --powersgd-start-iter to `hook` (whose values are the
// defaults shown), which must outlive the parse.
void add_comm_hook_flags(CLI::App& app, CommHookOptions& hook);

// After the parse: PowerSGD's flags without --comm-hook powersgd are a ConfigError.
void check_comm_hook_flags(const CLI::App& app, const CommHookOptions& hook);

}  // namespace dpt::cli
