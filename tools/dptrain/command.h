#pragma once
// How the CLI's subcommands plug into main: each one adds its CLI11 subcommand and the function
// that runs it once its flags are parsed. The function returns the process exit code.
//
// Everything after the first "--" on the command line is a program for `launch` to run, never
// dptrain's own flags; main cuts it off before parsing and hands it to the command.

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace dpt::cli {

struct Command {
  CLI::App* app;
  std::function<int(const std::vector<std::string>& program)> run;
  bool takes_program = false;  // whether "-- PROGRAM ARGS" is accepted
};

Command add_check_command(CLI::App& root);
Command add_launch_command(CLI::App& root);
Command add_bench_ddp_command(CLI::App& root);

}  // namespace dpt::cli
