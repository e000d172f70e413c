#include "torch_commands.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "dptrain/common/error.h"
#include "dptrain/launch/elastic_launch.h"
#include "torch_errors.h"

namespace dpt::cli {
namespace {

struct NamedCommand {
  std::string_view name;  // the subcommand's name, as its add function gives it
  Command (*add)(CLI::App& root);
};

Command add_elastic_launch_command(CLI::App& root) {
  return add_launch_command(root, [](const launch::LaunchOptions& options, const std::vector<std::string>& program,
                                     const Environment& env) {
    return options.min_nnodes() ? launch::launch_elastic(options, program, env)
                                : launch::launch_serving_store(options, program, env);
  });
}

// A LibTorch error that leaves a command becomes dptrain's own one line (torch_errors.h).
Command reporting_torch_errors(Command command) {
  command.run = [run = std::move(command.run)](const std::vector<std::string>& program) {
    try {
      return run(program);
    } catch (const c10::Error& error) {
      throw Error(describe_torch_error(error, Environment::current()));
    }
  };
  return command;
}

constexpr NamedCommand kCommands[] = {
    {"launch", add_elastic_launch_command},
    {"check", add_check_command},
    {"make-dataset", add_make_dataset_command},
    {"make-shards", add_make_shards_command},
    {"bench-loader", add_bench_loader_command},
    {"bench-ddp", add_bench_ddp_command},
    {"train", add_train_command},
    {"eval", add_eval_command},
    {"bench-dp", add_bench_dp_command},
    {"models", add_models_command},
    {"bench-models", add_bench_models_command},
    {"bench-peak", add_bench_peak_command},
    {"report", add_report_command},
    {"completion", add_completion_command},
    {"man", add_man_command},
};

}  // namespace

std::vector<Command> add_torch_commands(CLI::App& root, std::string_view only) {
  std::vector<Command> commands;
  for (const auto& command : kCommands) {
    if (!only.empty() && command.name != only) continue;
    commands.push_back(reporting_torch_errors(command.add(root)));
    if (commands.back().app->get_name() != command.name) {
      throw std::logic_error("torch_commands.cpp lists '" + std::string(command.name) + "' for the command '" +
                             commands.back().app->get_name() + "'");
    }
  }
  return commands;
}

}  // namespace dpt::cli
