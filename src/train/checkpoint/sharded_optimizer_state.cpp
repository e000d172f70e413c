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

// Elements [offset, offset + length) in memory order of a tensor laid out as `param`.
at::Tensor memory_slice(const at::Tensor& laid_out, int64_t offset, int64_t length) {
  return laid_out.as_strided({laid_out.numel()}, {1}, laid_out.storage_offset()).narrow(0, offset, length);
}

// Lays one rank's parts into `entries` (by the whole optimizer's number). A part that is a whole
// parameter (every one of ZeRO-1's; most of ZeRO-2's, where only those at which a bucket's shards
// meet are split) lends its tensors, viewed as the parameter; a split one is copied into a tensor
// laid out as the parameter, made by its first part.
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

// Each rank sends its parts' state and what they are parts of; `to` lays every part's tensors into
// a tensor shaped and strided as its parameter (the other entries, step counts, are the same in
// every part of a parameter).
Dict consolidated_optimizer_state_dict(const ShardedOptimizer& sharded, int to) {
  dist::Communicator& comm = sharded.communicator();
  const Dict local = optimizer_state_dict(sharded.local_optimizer());
  const std::vector<ShardPart>& parts = sharded.local_parts();
  at::Tensor table = at::empty({static_cast<int64_t>(parts.size()), 3}, at::kLong);
  for (size_t k = 0; k < parts.size(); ++k) {
    table[static_cast<int64_t>(k)] = at::tensor({parts[k].index, parts[k].offset, parts[k].length}, at::kLong);
  }
  Dict message = compat::string_dict();
  message.insert("state", local.at("state"));
  message.insert("segments", table);
  if (comm.rank() != to) {
    send_bytes(comm, compat::pickle_save(message), to);
    return compat::string_dict();
  }
  // One rank's message at a time, each dropped once laid out: the whole state, not twice it.
  const std::vector<at::Tensor> params = parameters_in_order(sharded);
  std::map<int64_t, Dict> whole_entries;  // by the whole optimizer's number, in order
  for (int rank = 0; rank < comm.size(); ++rank) lay_parts(message_of(comm, message, rank, to), params, whole_entries);
  Dict state(c10::IntType::get(), c10::AnyType::get());
  for (auto& [index, entry] : whole_entries) state.insert(index, entry);
  return whole_dict(local, state, sharded.param_groups());
}

// Each part takes its elements of its parameter's saved tensors, laid out as the parameter first,
// and viewed as the local optimizer's parameter is over the whole one's memory: the parameter
// itself under ZeRO-1, a flat slice of it under ZeRO-2.
void load_sharded_optimizer_state_dict(ShardedOptimizer& sharded, const Dict& whole) {
  const Dict state = entry_dict(whole, "state");
  const std::vector<at::Tensor> params = parameters_in_order(sharded);
  const std::vector<at::Tensor> locals = parameters_in_order(sharded.local_optimizer());
  Dict local_state(c10::IntType::get(), c10::AnyType::get());
  for (size_t k = 0; k < sharded.local_parts().size(); ++k) {
    const ShardPart& part = sharded.local_parts()[k];
    const auto found = state.find(part.index);
    if (found == state.end()) continue;
    const at::Tensor& param = params.at(static_cast<size_t>(part.index));
    const at::Tensor& local = locals.at(k);
    Dict entry = compat::string_dict();
    for (const auto& field : found->value().toGenericDict()) {
      const c10::IValue& value = field.value();
      if (!value.isTensor() || value.toTensor().dim() == 0) {
        entry.insert(field.key(), value);
        continue;
      }
      const at::Tensor& saved = value.toTensor();
      DPT_CHECK(saved.sizes() == param.sizes(), CheckpointError, "optimizer state: '", field.key().toStringRef(),
                "' has shape ", saved.sizes(), ", its parameter ", param.sizes());
      const at::Tensor laid_out = at::empty_like(param, saved.options()).copy_(saved);
      entry.insert(field.key(), laid_out
                                    .as_strided(local.sizes(), local.strides(),
                                                laid_out.storage_offset() + part.offset)
                                    .clone(at::MemoryFormat::Preserve));
    }
    local_state.insert(static_cast<int64_t>(k), entry);
  }
  load_local(sharded, sharded.local_optimizer(), whole, local_state);
}

}  // namespace dpt::train
