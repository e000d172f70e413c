#pragma once
// Several ranks as threads of one test process: an in-memory HashStore for the rendezvous and a
// real Gloo process group per thread over loopback, with float all_reduce through shared memory
// when asked (chosen by the same factory as init_process_group's). Every rank's exception is
// rethrown on the calling thread, with its rank, after all threads have ended (run_rank_threads,
// for ranks that join otherwise).
//
//   dpt::testing::run_ranks(2, [](dpt::dist::Communicator& comm) { ... });
//   dpt::testing::run_ranks(2, body, timeout, dpt::testing::Transport::SharedMemory);

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "dptrain/common/error.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/rendezvous.h"

namespace dpt::testing {

// UncheckedGloo: Gloo without comparing the ranks' records of each collective first
// (CommunicatorOptions::check_agreement), to show what that check catches.
enum class Transport { Gloo, SharedMemory, UncheckedGloo };

inline std::string to_string(Transport transport) {
  switch (transport) {
    case Transport::Gloo: return "Gloo";
    case Transport::SharedMemory: return "SharedMemory";
    case Transport::UncheckedGloo: return "UncheckedGloo";
  }
  return "?";
}
inline void PrintTo(Transport transport, std::ostream* out) { *out << to_string(transport); }

// Rank `rank` of `size` processes, all on this host.
inline dist::WorldInfo local_world(int rank, int size) {
  dist::WorldInfo world;
  world.rank = world.local_rank = rank;
  world.world_size = world.local_world_size = size;
  return world;
}

// A Gloo process group over loopback for `world`'s rank; every rank of it calls this.
inline compat::BackendPtr loopback_gloo(const compat::StorePtr& store, const dist::WorldInfo& world,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, world.rank, world.world_size, options);
}

// Runs body(rank) for ranks 0 .. world_size-1, each on a thread of its own. Once every thread has
// ended, throws with each failed rank's exception after its rank.
inline void run_rank_threads(int world_size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::string failures;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        failures += str("\n[rank ", rank, "] ", e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!failures.empty()) throw std::runtime_error("rank thread(s) failed:" + failures);
}

inline void run_ranks(int world_size, const std::function<void(dist::Communicator&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      Transport transport = Transport::Gloo) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  run_rank_threads(world_size, [&](int rank) {
    const dist::WorldInfo world = local_world(rank, world_size);
    dist::join(*store, world, dist::RendezvousOptions(timeout));
    auto backend = loopback_gloo(store, world, timeout);
    const bool shared_memory = transport == Transport::SharedMemory;
    dist::Communicator comm(backend, world,
                            dist::CommunicatorOptions()
                                .timeout(timeout)
                                .store(store)
                                .transport(dist::transport::TransportOptions()
                                               .shared_memory(shared_memory)
                                               .check_agreement(transport != Transport::UncheckedGloo)));
    if (shared_memory && world_size > 1 && comm.transport() != "gloo + shared memory") {
      throw std::runtime_error("asked for shared memory, got " + comm.transport());
    }
    body(comm);
  });
}

}  // namespace dpt::testing
