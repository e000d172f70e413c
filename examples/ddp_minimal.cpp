// ddp_minimal: the DistributedDataParallel tutorial, in C++. Each process trains a ResNet-20 on
// its shard of the data (a learnable synthetic image set, or an ImageFolder with train/ and val/);
// gradients are averaged during backward; the validation accuracy is computed over all ranks
// exactly (summed counts, no padded duplicates). The training loop is examples::train_ddp
// (common.cpp), which spawn.cpp runs too.
//
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/ddp_minimal --epochs 3
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/ddp_minimal --data digits/
//
// The Python original: torch.distributed.init_process_group + DistributedSampler +
// DistributedDataParallel + dist.all_reduce of the metrics.

#include <chrono>
#include <iostream>

#include "common.h"
#include "dptrain/common/host_memory.h"
#include "dptrain/dist/init.h"

int main(int argc, char** argv) {
  // Each step reuses the CPU memory the one before it freed, rather than faulting it in again.
  dpt::keep_freed_host_memory(dpt::Environment::current());
  examples::Flags flags;
  CLI::App app{"DistributedDataParallel on a synthetic image set; start it with dptrain launch"};
  examples::add_flags(app, flags, "per process");
  CLI11_PARSE(app, argc, argv);
  try {
    // The world (rank, size, master) comes from the environment dptrain launch sets (env://).
    auto comm = dpt::dist::init_process_group(
        dpt::dist::InitOptions().init_method(flags.dist_url).timeout(std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
    return examples::train_ddp("ddp_minimal", flags, comm, torch::kCPU);
  } catch (const std::exception& e) {
    std::cerr << "ddp_minimal: error: " << e.what() << std::endl;
    return 1;
  }
}
