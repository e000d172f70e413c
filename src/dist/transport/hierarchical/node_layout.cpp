#include "node_layout.h"

#include <algorithm>
#include <map>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/dist/store_text.h"

namespace dpt::dist::transport::hierarchical {

bool NodeLayout::pays() const {
  return machines.size() >= 2 &&
         std::any_of(machines.begin(), machines.end(), [](const std::vector<int>& ranks) { return ranks.size() >= 2; });
}

std::string NodeLayout::describe() const {
  size_t fewest = machines.front().size();
  size_t most = fewest;
  for (const auto& ranks : machines) {
    fewest = std::min(fewest, ranks.size());
    most = std::max(most, ranks.size());
  }
  return fewest == most ? str(machines.size(), " machines x ", most, " ranks")
                        : str(machines.size(), " machines of ", fewest, "-", most, " ranks");
}

NodeLayout layout_of(const std::vector<int>& node_of_rank, int rank) {
  DPT_ASSERT(rank >= 0 && rank < static_cast<int>(node_of_rank.size()), "rank ", rank, " outside the layout");
  std::map<int, std::vector<int>> by_node;  // ranks arrive ascending, so each list is
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) by_node[node_of_rank[r]].push_back(r);
  NodeLayout layout;
  for (auto& [node, ranks] : by_node) layout.machines.push_back(std::move(ranks));
  std::sort(layout.machines.begin(), layout.machines.end());  // by their lowest rank
  for (int m = 0; m < static_cast<int>(layout.machines.size()); ++m) {
    const auto& ranks = layout.machines[m];
    const auto here = std::find(ranks.begin(), ranks.end(), rank);
    if (here != ranks.end()) {
      layout.machine = m;
      layout.local = static_cast<int>(here - ranks.begin());
    }
  }
  return layout;
}

std::optional<NodeLayout> agree_on_layout(c10d::Store& store, const WorldInfo& world, bool wants,
                                          std::chrono::milliseconds timeout, std::string* why_not) {
  const std::vector<std::string> answers = exchange_text(store, "node", world.rank, world.world_size,
                                                        str(world.node_rank, wants ? " wants" : " flat"), timeout);
  std::vector<int> node_of_rank;
  for (int r = 0; r < world.world_size; ++r) {
    const std::string& said = answers[r];
    const auto space = said.find(' ');
    const auto node = decimal_number(std::string_view(said).substr(0, space));
    DPT_CHECK(node && space != std::string::npos, DistError, "rank ", world.rank, ": rank ", r,
              " said its node as '", said, "' in the hierarchical allreduce's setup: is it another dptrain version?");
    if (said.substr(space + 1) != "wants") {
      if (why_not && wants) *why_not = str("rank ", r, " turned it off");
      return std::nullopt;
    }
    node_of_rank.push_back(static_cast<int>(*node));
  }
  return layout_of(node_of_rank, world.rank);
}

}  // namespace dpt::dist::transport::hierarchical
