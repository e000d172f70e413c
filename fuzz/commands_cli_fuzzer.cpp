// libFuzzer target: the command lines of dptrain-torch's other commands (check, make-dataset,
// models, report, eval and every bench-*; `train` and `launch` have targets of their own), parsed
// by run_commands as the program parses them: CLI11's parse with each number's bounds
// (tools/dptrain/number_bounds.h), dptrain's own parsers (--auto-augment, --interpolation, ...),
// the flag-value check and the checks a command makes once its flags are parsed (make-dataset's
// classes against its splits). Each command's run is left out: nothing is measured, written or
// joined. Each line of the input is one argument after `dptrain`, the first naming the command. A
// usage error (CLI11's status) or a ConfigError (2) is the expected answer; status 1, an
// exception leaving dptrain's error handling, is a bug, as is anything the sanitizers report.
//
//   scripts/fuzz commands_cli 60

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "command_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"dptrain"};
  append_lines(data, size, args);
  CLI::App app{"dptrain", "dptrain"};
  app.require_subcommand(1);
  std::vector<dpt::cli::Command> commands{
      dpt::cli::add_check_command(app),        dpt::cli::add_make_dataset_command(app),
      dpt::cli::add_bench_loader_command(app), dpt::cli::add_bench_ddp_command(app),
      dpt::cli::add_eval_command(app),         dpt::cli::add_bench_dp_command(app),
      dpt::cli::add_models_command(app),       dpt::cli::add_bench_models_command(app),
      dpt::cli::add_bench_peak_command(app),   dpt::cli::add_report_command(app),
  };
  // Each command's flags live as long as its run function, which owns them: kept, never called.
  for (auto& command : commands) {
    command.run = [owner = std::move(command.run)](const std::vector<std::string>&) { return 0; };
  }
  expect_a_handled_answer(app, commands, std::move(args));
  return 0;
}
