#pragma once
// How the CLI's subcommands plug in: each adds its CLI11 subcommand and returns the function that
// runs it once its flags are parsed; run_commands() parses, dispatches and turns errors into one
// line and an exit code (2 for configuration errors, 1 for everything else).
//
// Everything after the first "--" on the command line is a program for `launch` to run, never
// dptrain's own flags: run_commands() cuts it off before parsing and hands it to the command.

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "dptrain/common/environment.h"
#include "dptrain/launch/launcher.h"

namespace dpt::cli {

struct Command {
  CLI::App* app;
  std::function<int(const std::vector<std::string>& program)> run;
  bool takes_program = false;  // whether "-- PROGRAM ARGS" is accepted
};

int run_commands(CLI::App& app, const std::vector<Command>& commands, int argc, char** argv);

// CLI11's parse, after dptrain's own check of every flag's `=VALUE` (true or false, or a count that
// fits a number): CLI11's releases read the rest differently (command.cpp).
void parse_command_line(CLI::App& app, int argc, const char* const* argv);

// What runs a launch once its flags are parsed. A fixed job: launch::launch. An elastic one
// (--nnodes MIN:MAX), or one whose workers go on after a loss (--on-failure continue), serves a c10d
// store (launch::launch_elastic, launch::launch_serving_store in dptrain-torch): the light
// `dptrain` binary, which has no c10d store, hands those command lines to dptrain-torch instead.
// fuzz/launch_cli_fuzzer.cpp passes ones that only resolve the options.
using Launcher = std::function<int(const launch::LaunchOptions&, const std::vector<std::string>& program,
                                   const Environment&)>;

Command add_launch_command(CLI::App& root, Launcher elastic, Launcher fixed = launch::launch);  // no LibTorch of its own
Command add_check_command(CLI::App& root);
Command add_make_dataset_command(CLI::App& root);
Command add_make_shards_command(CLI::App& root);
Command add_bench_loader_command(CLI::App& root);
Command add_bench_ddp_command(CLI::App& root);
Command add_train_command(CLI::App& root);
Command add_eval_command(CLI::App& root);
Command add_bench_dp_command(CLI::App& root);
Command add_models_command(CLI::App& root);
Command add_bench_models_command(CLI::App& root);
Command add_bench_peak_command(CLI::App& root);
Command add_report_command(CLI::App& root);
Command add_completion_command(CLI::App& root);  // the two of cli_docs.h, over `root`'s whole tree
Command add_man_command(CLI::App& root);         // (hidden: the package installs its page)

}  // namespace dpt::cli
