// Making every rank start from root's model and optimizer.

#include <c10/util/Type.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/hvd/broadcast_state.h"
#include "dptrain/parallel/replicas.h"

namespace dpt::hvd {

namespace {

std::string shape_and_dtype(const std::string& what, const at::Tensor& tensor) {
  return str(what, " of shape ", tensor.sizes(), " and dtype ", tensor.scalar_type());
}

// What the optimizers must have in common for root's state to fit every rank's.
std::vector<std::string> describe_optimizer(const torch::optim::Optimizer& optimizer) {
  std::vector<std::string> lines{str("a ", c10::demangle(typeid(optimizer).name()))};
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    lines.push_back(str("param group ", g, " of ", groups[g].params().size(), " parameters"));
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      lines.push_back(shape_and_dtype(str("param group ", g, " parameter ", i), groups[g].params()[i]));
    }
  }
  return lines;
}

std::string options_key(size_t group) { return str("group_options/", group); }

// The optimizer's own archive (state, keyed by parameter position) plus each group's options:
// LibTorch's Optimizer::load restores the state but leaves the hyper-parameters as they were.
std::string serialize(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive own(archive.compilation_unit());
  optimizer.save(own);
  archive.write("optimizer", own);
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::serialize::OutputArchive options(archive.compilation_unit());
    groups[g].options().serialize(options);
    archive.write(options_key(g), options);
  }
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void deserialize(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  auto& groups = optimizer.param_groups();
  c10::optional<at::Device> device;  // the type load_from takes in every LibTorch version
  for (const auto& group : groups) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), device);
  torch::serialize::InputArchive own;
  archive.read("optimizer", own);
  // load() only adds root's entries; a parameter root has no state for must have none here too.
  optimizer.state().clear();
  optimizer.load(own);
  for (size_t g = 0; g < groups.size(); ++g) {
    torch::serialize::InputArchive options;
    archive.read(options_key(g), options);
    groups[g].options().serialize(options);
  }
}

}  // namespace

void broadcast_parameters(const Context& context, const NamedTensors& tensors, int root_rank) {
  std::vector<std::string> lines{str("root rank ", root_rank)};
  std::vector<at::Tensor> values;
  for (const auto& item : tensors) {
    lines.push_back(shape_and_dtype("'" + item.key() + "'", item.value()));
    values.push_back(item.value());
  }
  context.check_agreement("broadcast_parameters", "", lines,
                          "Every rank must pass the same names, shapes and dtypes, in the same order, and the same root");
  context.check_root("broadcast_parameters", "", root_rank);
  broadcast_coalesced(*context.communicator(), values, root_rank);
}

void broadcast_optimizer_state(const Context& context, torch::optim::Optimizer& optimizer, int root_rank) {
  std::vector<std::string> lines = describe_optimizer(optimizer);
  lines.push_back(str("root rank ", root_rank));
  context.check_agreement("broadcast_optimizer_state", "", lines,
                          "Every rank must build the same optimizer over the same parameters and pass the same root");
  context.check_root("broadcast_optimizer_state", "", root_rank);
  if (context.size() == 1) return;
  const std::string bytes = context.rank() == root_rank ? serialize(optimizer) : std::string();
  const auto on = at::TensorOptions().device(context.communicator()->device());
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), on.dtype(at::kLong));
  context.communicator()->broadcast(length, root_rank);
  at::Tensor payload = at::zeros({length.cpu().item<int64_t>()}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), payload.data_ptr<uint8_t>());
  payload = payload.to(context.communicator()->device());
  context.communicator()->broadcast(payload, root_rank);
  if (context.rank() == root_rank) return;
  payload = payload.cpu();
  deserialize(optimizer, std::string(reinterpret_cast<const char*>(payload.data_ptr<uint8_t>()), payload.numel()));
}

}  // namespace dpt::hvd
