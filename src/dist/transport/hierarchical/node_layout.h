#pragma once
// Which ranks of a job share a machine, as the hierarchical allreduce groups them: from every
// rank's node number (the launcher's GROUP_RANK, WorldInfo::node_rank), learned through the
// rendezvous store. Machines are ordered by their lowest rank, and that rank leads its machine: it
// alone all-reduces across machines.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/world.h"

namespace dpt::dist::transport::hierarchical {

struct NodeLayout {
  std::vector<std::vector<int>> machines;  // each machine's job ranks, ascending
  int machine = 0;                         // this rank's machine, an index into `machines`
  int local = 0;                           // this rank's index on it; 0 leads it

  bool leads() const { return local == 0; }
  // Whether a hierarchy saves traffic: two machines or more, and one of them with two ranks or more.
  bool pays() const;
  // "2 machines x 2 ranks", or "3 machines of 1-4 ranks".
  std::string describe() const;
};

// The layout `rank` sees when rank r runs on node node_of_rank[r].
NodeLayout layout_of(const std::vector<int>& node_of_rank, int rank);

// Collective over `world`: every rank says its node and whether it `wants` the hierarchy. The
// layout, on every rank alike, when all of them want it; else none, and where this rank wanted it,
// the first rank that did not in `*why_not`.
std::optional<NodeLayout> agree_on_layout(c10d::Store& store, const WorldInfo& world, bool wants,
                                          std::chrono::milliseconds timeout, std::string* why_not);

}  // namespace dpt::dist::transport::hierarchical
