#include "dptrain/train/checkpoint/sharded_optimizer_state.h"

#include <algorithm>
#include <map>
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

// A tensor over `bytes`' memory: a message as large as a rank's optimizer state is sent and
// received where it lies, not copied into a tensor first.
at::Tensor byte_view(std::vector<char>& bytes) {
  return at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte);
}

// Bytes between two ranks: their length first, so the receiver can size its buffer.
void send_bytes(dist::Communicator& comm, std::vector<char> bytes, int to) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong).to(comm.device());
  comm.send(length, to);
  comm.send(byte_view(bytes).to(comm.device()), to);
}

std::vector<char> receive_bytes(dist::Communicator& comm, int from) {
  at::Tensor length = at::empty({1}, at::TensorOptions(at::kLong).device(comm.device()));
  comm.recv(length, from);
  std::vector<char> bytes(static_cast<size_t>(length.cpu().item<int64_t>()));
  at::Tensor view = byte_view(bytes);
  if (comm.device().is_cpu()) {
    comm.recv(view, from);
  } else {
    at::Tensor payload = at::empty({view.numel()}, at::TensorOptions(at::kByte).device(comm.device()));
    comm.recv(payload, from);
    view.copy_(payload);
  }
  return bytes;
}

// The whole optimizer's dict from one rank's `local` one: `state` under the whole optimizer's
// numbers, and the groups' hyper-parameters (the same on every rank) over all their parameters.
Dict whole_dict(const Dict& local, const Dict& state, const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  const auto local_groups = local.at("param_groups").toList();
  c10::List<c10::IValue> whole_groups(c10::AnyType::get());
  int64_t index = 0;
  for (size_t g = 0; g < local_groups.size(); ++g) {
    Dict group = local_groups.get(g).toGenericDict().copy();
    c10::List<int64_t> params;
    for (size_t i = 0; i < groups[g].params().size(); ++i) params.push_back(index++);
    group.insert_or_assign("params", params);
    whole_groups.push_back(group);
  }
  Dict whole = local.copy();
  whole.insert_or_assign("state", state);
  whole.insert_or_assign("param_groups", whole_groups);
  return whole;
}

// Loads `local_state` (under the local optimizer's numbers) and the saved groups' hyper-parameters
// into a sharded optimizer's local one, then gives its own groups those options (the next step
// hands them to the local optimizer). A saved group count that differs is left for
// load_optimizer_state_dict to report.
void load_local(torch::optim::Optimizer& sharded, torch::optim::Optimizer& local, const Dict& whole,
                const Dict& local_state) {
  const auto groups = entry_list(whole, "param_groups");
  const auto& own_groups = sharded.param_groups();
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
      for (size_t n = local.param_groups()[g].params().size(); n > 0; --n) params.push_back(local_index++);
      group.insert_or_assign("params", params);
    }
    local_groups.push_back(group);
  }
  Dict local_dict = compat::string_dict();
  local_dict.insert("state", local_state);
  local_dict.insert("param_groups", local_groups);
  load_optimizer_state_dict(local, local_dict);
  for (size_t g = 0; g < own_groups.size(); ++g) {
    sharded.param_groups()[g].set_options(local.param_groups()[g].options().clone());
  }
}

// Rank `rank`'s message at `to`: its own, or the one it sent.
Dict message_of(dist::Communicator& comm, const Dict& own, int rank, int to) {
  return rank == to ? own : compat::pickle_load(receive_bytes(comm, rank)).toGenericDict();
}

// ZeRO-2: elements [offset, offset + length) in memory order of a tensor laid out as `param`.
at::Tensor memory_slice(const at::Tensor& laid_out, int64_t offset, int64_t length) {
  return laid_out.as_strided({laid_out.numel()}, {1}, laid_out.storage_offset()).narrow(0, offset, length);
}

// Lays one rank's parts into `entries` (by the whole optimizer's number). A part that is a whole
// parameter (most are: only those where a bucket's shards meet are split) lends its tensors,
// viewed as the parameter; a split one is copied into a tensor laid out as the parameter, made by
// its first part.
void lay_parts(const Dict& shard, const std::vector<at::Tensor>& params, std::map<int64_t, Dict>& entries) {
  const at::Tensor table = shard.at("segments").toTensor();
  for (const auto& item : shard.at("state").toGenericDict()) {
    const auto row = table[item.key().toInt()];
    const int64_t index = row[0].item<int64_t>(), offset = row[1].item<int64_t>(), length = row[2].item<int64_t>();
    const at::Tensor& param = params.at(static_cast<size_t>(index));
    auto [found, fresh] = entries.try_emplace(index, compat::string_dict());
    Dict& entry = found->second;
    for (const auto& field : item.value().toGenericDict()) {
      const c10::IValue& value = field.value();
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        if (fresh) entry.insert_or_assign(field.key(), value);
        continue;
      }
      const at::Tensor& part = value.toTensor();
      if (length == param.numel()) {
        entry.insert_or_assign(field.key(), part.as_strided(param.sizes(), param.strides()));
        continue;
      }
      if (entry.find(field.key()) == entry.end()) entry.insert(field.key(), at::zeros_like(param, part.options()));
      memory_slice(entry.at(field.key()).toTensor(), offset, length).copy_(part);
    }
  }
}

std::vector<at::Tensor> parameters_in_order(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) params.insert(params.end(), group.params().begin(), group.params().end());
  return params;
}

}  // namespace

Dict consolidated_optimizer_state_dict(const ZeroRedundancyOptimizer& zero, int to) {
  dist::Communicator& comm = zero.communicator();
  const Dict local = optimizer_state_dict(zero.local_optimizer());
  Dict message = compat::string_dict();
  message.insert("state", local.at("state"));
  if (comm.rank() != to) {
    send_bytes(comm, compat::pickle_save(message), to);
    return compat::string_dict();
  }
  // Each rank's entries under the whole optimizer's numbers, in that order (as Python's are).
  std::vector<std::pair<int64_t, c10::IValue>> entries;
  for (int rank = 0; rank < comm.size(); ++rank) {
    const std::vector<int64_t> indices = owned_indices(zero, rank);
    for (const auto& item : message_of(comm, message, rank, to).at("state").toGenericDict()) {
      entries.emplace_back(indices.at(static_cast<size_t>(item.key().toInt())), item.value());
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Dict state(c10::IntType::get(), c10::AnyType::get());
  for (auto& [index, value] : entries) state.insert(index, std::move(value));
  return whole_dict(local, state, zero.param_groups());
}

// Each rank sends its parts' state and what they are parts of; `to` lays every part's tensors into
// a tensor shaped and strided as its parameter (the other entries, step counts, are the same in
// every part of a parameter).
Dict consolidated_optimizer_state_dict(const ZeroStage2Optimizer& zero, int to) {
  dist::Communicator& comm = zero.communicator();
  const Dict local = optimizer_state_dict(zero.local_optimizer());
  at::Tensor segments = at::empty({static_cast<int64_t>(zero.local_segments().size()), 3}, at::kLong);
  for (size_t k = 0; k < zero.local_segments().size(); ++k) {
    const auto& segment = zero.local_segments()[k];
    segments[static_cast<int64_t>(k)] = at::tensor({segment.index, segment.offset, segment.length}, at::kLong);
  }
  Dict message = compat::string_dict();
  message.insert("state", local.at("state"));
  message.insert("segments", segments);
  if (comm.rank() != to) {
    send_bytes(comm, compat::pickle_save(message), to);
    return compat::string_dict();
  }
  // One rank's message at a time, each dropped once laid out: the whole state, not twice it.
  const std::vector<at::Tensor> params = parameters_in_order(zero);
  std::map<int64_t, Dict> whole_entries;  // by the whole optimizer's number, in order
  for (int rank = 0; rank < comm.size(); ++rank) lay_parts(message_of(comm, message, rank, to), params, whole_entries);
  Dict state(c10::IntType::get(), c10::AnyType::get());
  for (auto& [index, entry] : whole_entries) state.insert(index, entry);
  return whole_dict(local, state, zero.param_groups());
}

void load_sharded_optimizer_state_dict(ZeroRedundancyOptimizer& zero, const Dict& whole) {
  const Dict state = entry_dict(whole, "state");
  const std::vector<int64_t> indices = owned_indices(zero, zero.communicator().rank());
  Dict local_state(c10::IntType::get(), c10::AnyType::get());
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto found = state.find(indices[k]);
    if (found != state.end()) local_state.insert(static_cast<int64_t>(k), found->value());
  }
  load_local(zero, zero.local_optimizer(), whole, local_state);
}

// Each part takes its elements of its parameter's saved tensors, laid out as the parameter first.
void load_sharded_optimizer_state_dict(ZeroStage2Optimizer& zero, const Dict& whole) {
  const Dict state = entry_dict(whole, "state");
  const std::vector<at::Tensor> params = parameters_in_order(zero);
  Dict local_state(c10::IntType::get(), c10::AnyType::get());
  for (size_t k = 0; k < zero.local_segments().size(); ++k) {
    const auto& segment = zero.local_segments()[k];
    const auto found = state.find(segment.index);
    if (found == state.end()) continue;
    const at::Tensor& param = params.at(static_cast<size_t>(segment.index));
    Dict part = compat::string_dict();
    for (const auto& field : found->value().toGenericDict()) {
      const c10::IValue& value = field.value();
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        part.insert(field.key(), value);
        continue;
      }
      const at::Tensor& saved = value.toTensor();
      DPT_CHECK(saved.sizes() == param.sizes(), CheckpointError, "optimizer state: '", field.key().toStringRef(),
                "' has shape ", saved.sizes(), ", its parameter ", param.sizes());
      const at::Tensor laid_out = at::empty_like(param, saved.options()).copy_(saved);
      part.insert(field.key(), memory_slice(laid_out, segment.offset, segment.length).clone());
    }
    local_state.insert(static_cast<int64_t>(k), part);
  }
  load_local(zero, zero.local_optimizer(), whole, local_state);
}

}  // namespace dpt::train
