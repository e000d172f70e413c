#include "dptrain/train/checkpoint/sharded_optimizer_state.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/train/checkpoint/optimizer_state.h"

namespace dpt::train {

namespace {

using Dict = c10::impl::GenericDict;

// The whole optimizer's index (parameters numbered across groups in order) of each parameter that
// `rank` owns, in the order its local optimizer numbers them.
std::vector<int64_t> owned_indices(const ZeroRedundancyOptimizer& zero, int rank) {
  std::vector<int64_t> indices;
  int64_t index = 0;
  const auto& groups = zero.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i, ++index) {
      if (zero.owner(g, i) == rank) indices.push_back(index);
    }
  }
  return indices;
}

Dict entry_dict(const Dict& dict, const char* key) {
  const auto found = dict.find(key);
  DPT_CHECK(found != dict.end() && found->value().isGenericDict(), CheckpointError, "optimizer state has no '", key,
            "' dict; the checkpoint was not written by dptrain or Python's optimizer.state_dict()");
  return found->value().toGenericDict();
}

c10::List<c10::IValue> entry_list(const Dict& dict, const char* key) {
  const auto found = dict.find(key);
  DPT_CHECK(found != dict.end() && found->value().isList(), CheckpointError, "optimizer state has no '", key,
            "' list; the checkpoint was not written by dptrain or Python's optimizer.state_dict()");
  return found->value().toList();
}

// Bytes between two ranks: their length first, so the receiver can size its buffer.
void send_bytes(dist::Communicator& comm, const std::vector<char>& bytes, int to) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong).to(comm.device());
  comm.send(length, to);
  at::Tensor payload = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(payload.data_ptr<uint8_t>()));
  comm.send(payload.to(comm.device()), to);
}

std::vector<char> receive_bytes(dist::Communicator& comm, int from) {
  at::Tensor length = at::empty({1}, at::TensorOptions(at::kLong).device(comm.device()));
  comm.recv(length, from);
  at::Tensor payload = at::empty({length.cpu().item<int64_t>()}, at::TensorOptions(at::kByte).device(comm.device()));
  comm.recv(payload, from);
  payload = payload.cpu();
  const char* data = reinterpret_cast<const char*>(payload.data_ptr<uint8_t>());
  return std::vector<char>(data, data + payload.numel());
}

}  // namespace

Dict consolidated_optimizer_state_dict(const ZeroRedundancyOptimizer& zero, int to) {
  dist::Communicator& comm = zero.communicator();
  const Dict local = optimizer_state_dict(zero.local_optimizer());
  if (comm.rank() != to) {
    send_bytes(comm, compat::pickle_save(local.at("state")), to);
    return compat::string_dict();
  }
  // Each rank's entries under the whole optimizer's numbers, in that order (as Python's are).
  std::vector<std::pair<int64_t, c10::IValue>> entries;
  for (int rank = 0; rank < comm.size(); ++rank) {
    const Dict shard =
        rank == to ? local.at("state").toGenericDict() : compat::pickle_load(receive_bytes(comm, rank)).toGenericDict();
    const std::vector<int64_t> indices = owned_indices(zero, rank);
    for (const auto& item : shard) {
      entries.emplace_back(indices.at(static_cast<size_t>(item.key().toInt())), item.value());
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Dict state(c10::IntType::get(), c10::AnyType::get());
  for (auto& [index, value] : entries) state.insert(index, std::move(value));
  // The groups' hyper-parameters are the same on every rank; their parameters are all of them.
  const auto local_groups = local.at("param_groups").toList();
  c10::List<c10::IValue> groups(c10::AnyType::get());
  int64_t index = 0;
  for (size_t g = 0; g < local_groups.size(); ++g) {
    Dict group = local_groups.get(g).toGenericDict().copy();
    c10::List<int64_t> params;
    for (size_t i = 0; i < zero.param_groups()[g].params().size(); ++i) params.push_back(index++);
    group.insert_or_assign("params", params);
    groups.push_back(group);
  }
  Dict whole = local.copy();
  whole.insert_or_assign("state", state);
  whole.insert_or_assign("param_groups", groups);
  return whole;
}

void load_sharded_optimizer_state_dict(ZeroRedundancyOptimizer& zero, const Dict& whole) {
  const auto groups = entry_list(whole, "param_groups");
  const Dict state = entry_dict(whole, "state");
  const auto& own_groups = zero.param_groups();
  const std::vector<int64_t> indices = owned_indices(zero, zero.communicator().rank());
  // The shard's dict: the same groups holding the owned parameters, under the local numbers. (A
  // group count that differs is left for load_optimizer_state_dict to report.)
  c10::List<c10::IValue> local_groups(c10::AnyType::get());
  int64_t local_index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    Dict group = groups.get(g).toGenericDict().copy();
    if (g < own_groups.size()) {
      const size_t saved = entry_list(group, "params").size();
      DPT_CHECK(saved == own_groups[g].params().size(), CheckpointError, "optimizer state: parameter group ", g,
                " has ", saved, " parameters, the model ", own_groups[g].params().size(),
                "; the checkpoint is for a different model or other weight-decay flags");
      c10::List<int64_t> params;
      for (size_t n = zero.local_optimizer().param_groups()[g].params().size(); n > 0; --n) {
        params.push_back(local_index++);
      }
      group.insert_or_assign("params", params);
    }
    local_groups.push_back(group);
  }
  Dict local_state(c10::IntType::get(), c10::AnyType::get());
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto found = state.find(indices[k]);
    if (found != state.end()) local_state.insert(static_cast<int64_t>(k), found->value());
  }
  Dict local = compat::string_dict();
  local.insert("state", local_state);
  local.insert("param_groups", local_groups);
  load_optimizer_state_dict(zero.local_optimizer(), local);
  // The next step hands this optimizer's group options to the local one: they must be the loaded.
  for (size_t g = 0; g < own_groups.size(); ++g) {
    zero.param_groups()[g].set_options(zero.local_optimizer().param_groups()[g].options().clone());
  }
}

}  // namespace dpt::train
