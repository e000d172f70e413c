// dptrain-torch: every dptrain command, with LibTorch loaded. Users call it through `dptrain`.

#include "dptrain/common/host_memory.h"
#include "dptrain/compat/onednn.h"
#include "torch_commands.h"
#include "version.h"

int main(int argc, char** argv) {
  // Before any training allocates: every step then reuses the memory the one before it freed.
  dpt::keep_freed_host_memory(dpt::Environment::current());
  // Before any convolution: one that oneDNN cannot plan here ends the process or computes wrong
  // numbers. The training banner says so (print_hints); other commands' output stays as it is.
  dpt::compat::avoid_onednn_where_it_cannot_plan();
  CLI::App app{"dptrain: data-parallel training of image classifiers on LibTorch", "dptrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", dpt::cli::version_line());
  return dpt::cli::run_commands(app, dpt::cli::add_torch_commands(app), argc, argv);
}
