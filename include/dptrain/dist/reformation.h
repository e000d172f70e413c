#pragma once
// Which ranks go on after a loss: the ranks that remain agree, through the group's store, on who
// is still there, so that each builds the same smaller group (init.h's regroup) without a restart.
//
//   dpt::dist::Survivors left = dpt::dist::agree_on_survivors(
//       *comm->store(), dpt::dist::ReformationOptions(/*generation=*/1, comm->rank(), comm->size())
//                           .lost({2}).window(std::chrono::seconds(3)));
//   // left.ranks: the old ranks that go on, ascending; left.rank: this one's place among them
//
// Each rank that goes on says so under the generation's keys. The first rank that sees every rank
// accounted for (said so, named lost by the one who found it, or known gone) or whose window has
// passed closes
// the list, atomically (the store's compare-and-set): every rank reads that one list, so no two
// ranks can form different groups. A rank that said so after the list closed is not on it, and is
// told (DistError): it must leave the job, since the others no longer wait for it.
// The store must outlive the loss: under `dptrain launch` rank 0 serves it, so the ranks can go
// on without any rank but rank 0.

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"

namespace dpt::dist {

struct ReformationOptions {
  ReformationOptions(int generation, int rank, int world_size)
      : generation_(generation), rank_(rank), world_size_(world_size) {}
  // Counts the group's re-formations from 1; every rank that takes part passes the same one.
  TORCH_ARG(int, generation);
  TORCH_ARG(int, rank);        // this rank, in the group that lost a rank
  TORCH_ARG(int, world_size);  // that group's size
  // How far this rank got (its last completed step): a loss may cut a collective short on some
  // ranks after others completed it, so the ranks left may differ by a step (Survivors::progress).
  TORCH_ARG(int64_t, progress) = 0;
  // Ranks known lost: nobody waits for them.
  TORCH_ARG(std::vector<int>, lost) = {};
  // Asked while the list is open: whether a rank not heard from is known gone (its launcher saw
  // its process end, dist/rendezvous.h's failed_worker_key). Unset: only `lost` and the window.
  TORCH_ARG(std::function<bool(int rank)>, gone);
  // How long after this rank arrives the list may close without ranks not yet heard from: long
  // enough for every live rank to leave its collective (the heartbeat's bound).
  TORCH_ARG(std::chrono::milliseconds, window) = std::chrono::seconds(5);
};

struct Survivors {
  std::vector<int> ranks;  // the old ranks that go on, ascending
  int rank = 0;            // this rank's place among them: its rank in the new group
  std::vector<int64_t> progress;  // each one's ReformationOptions::progress, in the same order
  int size() const { return static_cast<int>(ranks.size()); }
};

// Collective over the ranks that remain. Throws DistError when this rank was left out, or when
// the store does not answer (the rank that served it is the one lost).
Survivors agree_on_survivors(c10d::Store& store, const ReformationOptions& options);

}  // namespace dpt::dist
