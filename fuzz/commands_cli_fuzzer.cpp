// libFuzzer target: every command line dptrain-torch takes (tools/dptrain/torch_commands.cpp), parsed
// by run_commands as the program parses them: CLI11's parse with each number's bounds
// (tools/dptrain/number_bounds.h), dptrain's own parsers (--auto-augment, --interpolation, ...),
// the flag-value check and the checks a command makes once its flags are parsed (make-dataset's
// classes against its splits). Each command's run is left out: nothing is measured, written or
// joined; `train` and `launch` have targets of their own that go on to the checks their runs make.
// Each line of the input is one argument after `dptrain`, the first naming the command. A usage
// error (CLI11's status) or a ConfigError (2) is the expected answer; status 1, an exception
// leaving dptrain's error handling, is a bug, as is anything the sanitizers report.
//
//   scripts/fuzz commands_cli 60

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command_line.h"
#include "torch_commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"dptrain"};
  append_lines(data, size, args);
  CLI::App app{"dptrain", "dptrain"};
  app.require_subcommand(1);
  // Only the command the first line names; a word that names none gets no command and is refused as
  // the program refuses it. No first line, or an empty one, builds them all.
  const std::string_view name = args.size() > 1 ? std::string_view(args[1]) : std::string_view();
  std::vector<dpt::cli::Command> commands = dpt::cli::add_torch_commands(app, name);
  // Each command's flags live as long as its run function, which owns them: kept, never called.
  for (auto& command : commands) {
    command.run = [owner = std::move(command.run)](const std::vector<std::string>&) { return 0; };
  }
  expect_a_handled_answer(app, commands, std::move(args));
  return 0;
}
