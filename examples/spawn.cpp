// spawn: the torch.multiprocessing.spawn tutorial, in C++. One command starts the workers itself
// (one per visible GPU, or --nprocs of them), each joins a tcp:// rendezvous on a free port and
// trains with DistributedDataParallel (the training of ddp_minimal); rank 0 reports the exact
// validation accuracy over all ranks.
//
//   build/bin/spawn --nprocs 2 --epochs 3                     # CPU: say how many processes
//   CUDA_VISIBLE_DEVICES=1,3 build/bin/spawn --epochs 3       # 2 workers on cuda:0 and cuda:1
//
// The Python original: mp.spawn(main_worker, nprocs=ngpus_per_node, args=(...)) with
// dist.init_process_group(init_method="tcp://127.0.0.1:FREEPORT", rank=gpu, world_size=ngpus).
// Worker i uses cuda:i, the i-th visible GPU; using the physical id (cuda:3 for
// CUDA_VISIBLE_DEVICES=1,3) is the classic mistake, and that device does not exist there.
// Everything in main() before spawn() runs again in each worker (dpt::launch::spawn explains why).

#include <chrono>
#include <iostream>
#include <optional>

#include "common.h"
#include "dptrain/common/environment.h"
#include "dptrain/dist/init.h"
#include "dptrain/launch/spawn.h"

namespace {

// One worker: spawn() set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for it.
int main_worker(const examples::Flags& flags, int local_rank) {
  const auto env = dpt::Environment::current();
  const std::string url = "tcp://" + env.get("MASTER_ADDR").value() + ":" + env.get("MASTER_PORT").value();
  const bool gpu = torch::cuda::is_available() && local_rank < static_cast<int>(torch::cuda::device_count());
  const torch::Device device = gpu ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank))
                                   : torch::Device(torch::kCPU);
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().init_method(url).timeout(
      std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  if (comm->rank() == 0) std::cout << "spawn: rendezvous " << url << ", rank 0 on " << device << std::endl;
  return examples::train_ddp("spawn", flags, comm, device);
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags;
  int nprocs = 0;
  CLI::App app{"DistributedDataParallel in workers this program starts itself (the mp.spawn style)"};
  examples::add_flags(app, flags, "per process");
  app.add_option("--nprocs", nprocs, "worker processes (default: one per visible GPU)");
  CLI11_PARSE(app, argc, argv);
  try {
    return dpt::launch::spawn([&](int local_rank) { return main_worker(flags, local_rank); },
                              nprocs > 0 ? std::optional<int>(nprocs) : std::nullopt);
  } catch (const std::exception& e) {
    std::cerr << "spawn: error: " << e.what() << std::endl;
    return 1;
  }
}
