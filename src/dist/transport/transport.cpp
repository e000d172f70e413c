#include "dptrain/dist/transport/transport.h"

#include <algorithm>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dptrain/common/error.h"
#include "dptrain/dist/store_text.h"
#include "dptrain/dist/transport/hierarchical/transport.h"
#include "dptrain/dist/transport/process_group/transport.h"
#include "dptrain/dist/transport/shm/transport.h"
#include "hierarchical/node_layout.h"

namespace dpt::dist::transport {
namespace {

std::unique_ptr<process_group::Transport> through_backend(
    compat::BackendPtr backend, const TransportOptions& options, std::string note = {},
    process_group::Transport::Starting starting = process_group::Transport::Starting::kOnItsThread) {
  return std::make_unique<process_group::Transport>(std::move(backend), options, std::move(note), starting);
}

// The hierarchical transport where every rank wants it and it pays, else null with the reason in
// `*why_not` (empty where the job's layout simply gains nothing from it).
std::unique_ptr<Transport> hierarchical_transport(compat::BackendPtr& backend, const WorldInfo& world,
                                                  const TransportOptions& options, std::string* why_not) {
  c10d::PrefixStore store("hierarchy", options.store());
  const bool wants = options.hierarchical() && options.shared_memory() && options.group_backend();
  const auto layout = hierarchical::agree_on_layout(store, world, wants, options.timeout(), why_not);
  if (!layout || !layout->pays()) return nullptr;
  const std::vector<int>& mates = layout->machines[layout->machine];
  hierarchical::Transport::Groups groups;
  std::string failed;
  if (mates.size() >= 2) {
    WorldInfo local = world;
    local.rank = local.local_rank = layout->local;
    local.world_size = local.local_world_size = static_cast<int>(mates.size());
    // Two segments of half the usual slots (a page at least): together the size of one.
    const size_t half_slot = shm::default_slot_bytes(local.world_size) / 2 / 4096 * 4096;
    const auto shm_options =
        shm::Options().timeout(options.timeout()).job_ranks(mates).slot_bytes(std::max<size_t>(4096, half_slot));
    for (auto [group, name] :
         {std::pair{&groups.reductions, "reductions"}, std::pair{&groups.broadcasts, "broadcasts"}}) {
      // Collective on the machine: every rank attaches both, whatever became of the first.
      c10d::PrefixStore shm_store(str("hierarchy/machine", layout->machine, "/", name), options.store());
      std::string why;
      *group = shm::Allreduce::attach(shm_store, local, shm_options, &why);
      if (failed.empty()) failed = why;
    }
  }
  failed = first_refusal(store, "ready", world.rank, world.world_size, failed, options.timeout());
  if (!failed.empty()) {
    *why_not = "no shared memory on a machine: " + failed;
    return nullptr;
  }
  if (layout->leads()) {
    auto leaders_store = c10::make_intrusive<c10d::PrefixStore>("hierarchy/leaders", options.store());
    // The hierarchy's own thread starts the leaders' operations (hierarchical/transport.cpp).
    groups.leaders = through_backend(
        options.group_backend()(leaders_store, layout->machine, static_cast<int>(layout->machines.size())), options,
        /*note=*/{}, process_group::Transport::Starting::kOnTheCallersThread);
  }
  return std::make_unique<hierarchical::Transport>(layout->describe(), world.world_size, std::move(groups),
                                                   through_backend(std::move(backend), options), options.timeout());
}

}  // namespace

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
    if (local) return std::make_unique<shm::Transport>(std::move(local), through_backend(std::move(backend), options));
    why_not = "no shared memory: " + why_not;
  } else if (world.world_size > 1 && !all_on_this_host && cpu_backend && options.store()) {
    if (auto hierarchical = hierarchical_transport(backend, world, options, &why_not)) return hierarchical;
    if (!why_not.empty()) why_not = "not hierarchical: " + why_not;
  }
  return through_backend(std::move(backend), options, why_not);
}

}  // namespace dpt::dist::transport
