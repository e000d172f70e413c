// dptrain-torch: every dptrain command, with LibTorch loaded. Users call it through `dptrain`.

#include "command.h"
#include "dptrain/common/host_memory.h"
#include "dptrain/compat/compat.h"
#include "dptrain/launch/elastic_launch.h"

int main(int argc, char** argv) {
  // Before any training allocates: every step then reuses the memory the one before it freed.
  dpt::keep_freed_host_memory(dpt::Environment::current());
  CLI::App app{"dptrain: data-parallel training of image classifiers on LibTorch", "dptrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dptrain 0.1.0 (LibTorch " + dpt::compat::torch_version() + ")");
  std::vector<dpt::cli::Command> commands{
      dpt::cli::add_launch_command(app, dpt::launch::launch_elastic),
      dpt::cli::add_check_command(app),
      dpt::cli::add_make_dataset_command(app),
      dpt::cli::add_bench_loader_command(app),
      dpt::cli::add_bench_ddp_command(app),
      dpt::cli::add_train_command(app),
      dpt::cli::add_eval_command(app),
      dpt::cli::add_bench_dp_command(app),
      dpt::cli::add_models_command(app),
      dpt::cli::add_bench_models_command(app),
      dpt::cli::add_bench_peak_command(app),
      dpt::cli::add_report_command(app),
  };
  return dpt::cli::run_commands(app, commands, argc, argv);
}
