// libFuzzer target: `dptrain launch`'s command line (tools/dptrain/launch_command.cpp): CLI11's
// parse of the flags, dptrain's own parsers of --nnodes, --gpus and --nproc-per-node, then the
// launcher's resolution and checks of the options and the workers' environments it would start
// (launch::resolve, make_worker_specs), with nothing started. Each line of the input is one
// argument after `dptrain launch`; the program is `-- true`. A usage error or a ConfigError is
// the expected answer (run_commands exits 2 or CLI11's code); exit status 1, any other exception
// leaving dptrain's error handling, is a bug.
//
//   scripts/fuzz launch_cli 60

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "command_line.h"
#include "dptrain/launch/launcher.h"

namespace {

// Resolves what a launch would run, and runs nothing. --standalone picks a free port: a socket
// bound and closed per input. The log folder is left out: it would be created.
int resolve_only(const dpt::launch::LaunchOptions& options, const std::vector<std::string>& program,
                 const dpt::Environment& env) {
  dpt::launch::LaunchOptions resolved = dpt::launch::resolve(options, env);
  resolved.log_dir(std::nullopt);
  dpt::launch::make_worker_specs(resolved, program, env, /*restart_count=*/0);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"dptrain", "launch"};
  append_lines(data, size, args);
  args.insert(args.end(), {"--", "true"});
  CLI::App app{"dptrain", "dptrain"};
  app.require_subcommand(1);
  expect_a_handled_answer(app, {dpt::cli::add_launch_command(app, resolve_only, resolve_only)}, std::move(args));
  return 0;
}
