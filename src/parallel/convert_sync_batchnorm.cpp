#include "dptrain/parallel/convert_sync_batchnorm.h"

#include <optional>
#include <vector>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>

#include "dptrain/common/error.h"
#include "dptrain/parallel/sync_batch_norm.h"

namespace dpt {
namespace {

namespace nn = torch::nn;

// The options of a LibTorch batch norm, or nullopt when `module` is none.
std::optional<nn::BatchNormOptions> batch_norm_options(nn::Module& module) {
  if (auto* bn = module.as<nn::BatchNorm1d>()) return bn->options;
  if (auto* bn = module.as<nn::BatchNorm2d>()) return bn->options;
  if (auto* bn = module.as<nn::BatchNorm3d>()) return bn->options;
  return std::nullopt;
}

// A batch norm found below the model, with where it is registered.
struct Found {
  nn::Module* parent;
  std::string name;  // the child's name in `parent`
  std::shared_ptr<nn::Module> layer;
  nn::BatchNormOptions options;
};

std::string joined(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Collects every batch norm below `module`, failing on the first one whose parent cannot swap it.
void find_batch_norms(nn::Module& module, const std::string& path, std::vector<Found>& found) {
  for (const auto& child : module.named_children()) {
    auto options = batch_norm_options(*child.value());
    if (!options) {
      find_batch_norms(*child.value(), joined(path, child.key()), found);
      continue;
    }
    DPT_CHECK(module.as<nn::Sequential>() != nullptr || dynamic_cast<NormLayerHolder*>(&module) != nullptr,
              ConfigError, "convert_sync_batchnorm: ", path.empty() ? "the model" : "'" + path + "'", " (",
              module.name(), ") holds the batch norm '", joined(path, child.key()),
              "' in a member of its own, where it cannot be swapped; nothing was converted. Build that module "
              "with dpt::SyncBatchNorm, hold the norm in a torch::nn::Sequential, or implement "
              "dpt::NormLayerHolder");
    found.push_back({&module, child.key(), child.value(), *options});
  }
}

// A SyncBatchNorm with `source`'s options and bitwise copies of its parameters and buffers (same
// devices, types and requires_grad), in `source`'s training mode.
SyncBatchNorm copy_as_sync(const Found& source, const std::shared_ptr<dist::Communicator>& comm) {
  SyncBatchNorm layer(source.options, comm);
  torch::NoGradGuard no_grad;
  const auto params = source.layer->named_parameters(/*recurse=*/false);
  for (auto& param : layer->named_parameters(/*recurse=*/false)) {
    const auto& value = params[param.key()];
    param.value().set_data(value.detach().clone());
    param.value().requires_grad_(value.requires_grad());
  }
  const auto buffers = source.layer->named_buffers(/*recurse=*/false);
  for (auto& buffer : layer->named_buffers(/*recurse=*/false)) {
    buffer.value().set_data(buffers[buffer.key()].detach().clone());
  }
  layer->train(source.layer->is_training());
  return layer;
}

// Puts `layer` in place of the child `found.name` of a Sequential: the registry and the entry
// forward() runs.
void swap_in_sequential(nn::SequentialImpl& sequential, const Found& found, const SyncBatchNorm& layer) {
  size_t index = 0;
  for (const auto& child : sequential.named_children()) {
    if (child.key() == found.name) break;
    ++index;
  }
  DPT_ASSERT(index < sequential.size() && sequential.ptr(index) == found.layer, "child '", found.name,
             "' of a Sequential is not its entry ", index);
  *(sequential.begin() + static_cast<std::ptrdiff_t>(index)) = nn::AnyModule(layer);
  sequential.replace_module(found.name, layer.ptr());
}

}  // namespace

int convert_sync_batchnorm(nn::Module& model, std::shared_ptr<dist::Communicator> comm) {
  DPT_CHECK(!batch_norm_options(model), ConfigError, "convert_sync_batchnorm: the model itself is a batch norm ",
            "layer, which cannot be swapped in place; create a dpt::SyncBatchNorm with its options instead");
  std::vector<Found> found;
  find_batch_norms(model, "", found);
  for (const auto& f : found) {
    auto layer = copy_as_sync(f, comm);
    if (auto* sequential = f.parent->as<nn::Sequential>()) {
      swap_in_sequential(*sequential, f, layer);
    } else {
      dynamic_cast<NormLayerHolder&>(*f.parent).replace_norm_layer(f.name, nn::AnyModule(layer), sync_batch_norm_factory(comm, f.options));
    }
  }
  return static_cast<int>(found.size());
}

}  // namespace dpt
