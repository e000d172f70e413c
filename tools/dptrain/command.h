#pragma once
// How the CLI's subcommands plug into main: each one adds its CLI11 subcommand and the function
// that runs it once its flags are parsed. The function returns the process exit code.

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace dpt::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_check_command(CLI::App& root);
Command add_make_dataset_command(CLI::App& root);
Command add_bench_loader_command(CLI::App& root);

}  // namespace dpt::cli
