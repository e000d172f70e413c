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
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
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
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) args.push_back(line);
  args.insert(args.end(), {"--", "true"});
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  CLI::App app{"dptrain", "dptrain"};
  app.require_subcommand(1);
  std::ostringstream quiet;  // CLI11's usage messages
  auto* out = std::cout.rdbuf(quiet.rdbuf());
  auto* err = std::cerr.rdbuf(quiet.rdbuf());
  const int status = dpt::cli::run_commands(
      app, {dpt::cli::add_launch_command(app, resolve_only, resolve_only)}, static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  if (status == 1) {
    std::cerr << quiet.str();
    std::abort();  // neither a usage error nor a ConfigError
  }
  return 0;
}
