#pragma once
// Rendezvous: every rank meets every other through a c10d store before any collective runs.
//
// dptrain's join protocol on top of the store makes the usual ways a job goes wrong fail fast and
// by name, instead of PyTorch's silent wait: two processes claiming one rank, ranks started with
// different world sizes, a rank that never arrives (named, with the time waited), a busy port on
// the master, and a master that cannot be reached.

#include <chrono>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/init_method.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

struct RendezvousOptions {
  explicit RendezvousOptions(std::chrono::milliseconds timeout) : timeout(timeout) {}
  std::chrono::milliseconds timeout;  // bound on connecting and on waiting for every rank
};

// Creates the store `method` names and joins this rank into it. Returns once all ranks have
// joined; throws ConfigError, DistError or TimeoutError naming this rank and the cause otherwise.
compat::StorePtr rendezvous(const InitMethod& method, const WorldInfo& world,
                            const RendezvousOptions& options);

// The join protocol alone, over any store (an in-memory HashStore in tests).
void join(c10d::Store& store, const WorldInfo& world, const RendezvousOptions& options);

}  // namespace dpt::dist
