// dptrain-torch: every dptrain command, with LibTorch loaded. Users call it through `dptrain`.

#include <string>

#include "dptrain/common/host_memory.h"
#include "dptrain/compat/compat.h"
#include "dptrain/compat/onednn.h"
#include "torch_commands.h"

namespace {

// dptrain's version (CMakeLists.txt's project(), the one place it is written), the LibTorch it was
// built with, and whether CUDA and NCCL are in that build.
std::string version_line() {
#ifdef DPTRAIN_WITH_CUDA
  const char* cuda = "yes";
#else
  const char* cuda = "no";
#endif
#ifdef DPTRAIN_WITH_NCCL
  const char* nccl = "yes";
#else
  const char* nccl = "no";
#endif
  return std::string("dptrain ") + DPTRAIN_VERSION + " (LibTorch " + dpt::compat::torch_version() + ", CUDA: " + cuda +
         ", NCCL: " + nccl + ")";
}

}  // namespace

int main(int argc, char** argv) {
  // Before any training allocates: every step then reuses the memory the one before it freed.
  dpt::keep_freed_host_memory(dpt::Environment::current());
  // Before any convolution: one that oneDNN cannot plan here ends the process or computes wrong
  // numbers. The training banner says so (print_hints); other commands' output stays as it is.
  dpt::compat::avoid_onednn_where_it_cannot_plan();
  CLI::App app{"dptrain: data-parallel training of image classifiers on LibTorch", "dptrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_line());
  return dpt::cli::run_commands(app, dpt::cli::add_torch_commands(app), argc, argv);
}
