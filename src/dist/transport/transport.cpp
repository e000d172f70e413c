#include "dptrain/dist/transport/transport.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/dist/transport/process_group/transport.h"
#include "dptrain/dist/transport/shm/transport.h"

namespace dpt::dist::transport {

std::unique_ptr<Transport> make_transport(compat::BackendPtr backend, const WorldInfo& world,
                                          const TransportOptions& options) {
  DPT_ASSERT(backend, "a transport needs a backend");
  const bool all_on_this_host = world.world_size > 1 && world.local_world_size == world.world_size;
  // Shared memory is for CPU tensors: a backend for GPUs (NCCL) has its own faster ways.
  const bool cpu_backend = backend->getBackendName() == "gloo";
  std::string why_not;
  if (options.shared_memory() && all_on_this_host && cpu_backend) {
    DPT_ASSERT(options.store(), "shared memory needs the rendezvous store");
    c10d::PrefixStore store("shm", options.store());
    auto local = shm::Allreduce::attach(store, world, shm::Options().timeout(options.timeout()), &why_not);
    if (local) {
      auto fallback =
          std::make_unique<process_group::Transport>(std::move(backend), options);
      return std::make_unique<shm::Transport>(std::move(local), std::move(fallback));
    }
    why_not = "no shared memory: " + why_not;
  }
  return std::make_unique<process_group::Transport>(std::move(backend), options, why_not);
}

}  // namespace dpt::dist::transport
