// dptrain: data-parallel training of image classifiers on LibTorch.
// A thin front over the library: parse flags into option structs, run, turn errors into one line
// and an exit code (2 for configuration errors, 1 for everything else).

#include <iostream>

#include "command.h"
#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"

int main(int argc, char** argv) {
  CLI::App app{"dptrain: data-parallel training of image classifiers on LibTorch"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dptrain 0.1.0 (LibTorch " + dpt::compat::torch_version() + ")");

  std::vector<dpt::cli::Command> commands{
      dpt::cli::add_check_command(app),
      dpt::cli::add_launch_command(app),
      dpt::cli::add_bench_ddp_command(app),
  };

  int own_args = argc;
  std::vector<std::string> program;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      own_args = i;
      program.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  try {
    app.parse(own_args, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    for (auto& command : commands) {
      if (!command.app->parsed()) continue;
      if (own_args != argc && !command.takes_program) {
        throw dpt::ConfigError("'dptrain " + command.app->get_name() + "' takes no '-- PROGRAM' part");
      }
      return command.run(program);
    }
  } catch (const dpt::ConfigError& e) {
    std::cerr << "dptrain: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dptrain: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
