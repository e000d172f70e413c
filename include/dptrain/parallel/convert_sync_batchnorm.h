#pragma once
// Swaps every BatchNorm layer of a model for a SyncBatchNorm, in place, as
// torch.nn.SyncBatchNorm.convert_sync_batchnorm:
//
//   auto comm = dpt::dist::init_process_group();
//   auto model = dpt::models::resnet50();
//   dpt::convert_sync_batchnorm(*model, comm);          // before DDP and before the optimizer
//   dpt::DistributedDataParallel ddp(model, comm);
//   torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.1));
//
// Each SyncBatchNorm takes over the options and the values of the layer it replaces (weight,
// bias, running_mean, running_var, num_batches_tracked: same names, same devices and types,
// bitwise equal), so the state dict is unchanged. The values are copied into new tensors, so an
// optimizer built before the conversion would update tensors the model no longer uses: convert
// first.
//
// LibTorch modules call their children through their own members, not through the registry, so
// a child can only be swapped where the conversion can reach that member too:
//  - in torch::nn::Sequential (its entries are swapped along with the registry);
//  - in modules implementing dpt::NormLayerHolder (norm_layer_holder.h); dptrain's ResNets and
//    their blocks do.
// Any other module holding a BatchNorm child makes the conversion fail with a ConfigError naming
// it, before anything is changed. Models built with a norm-layer factory
// (dpt::sync_batch_norm_factory) need no conversion.
//
// LibTorch's Cloneable::clone() rebuilds a module from its options and then copies values into
// children of the same types. dptrain's ResNets record the swap in their options (norm_layer
// becomes dpt::sync_batch_norm_factory), so their clones and reset() keep SyncBatchNorm; a module
// of another kind may need the same care in its replace_norm_layer.

#include <memory>

#include <torch/nn/module.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/models/norm_layer_holder.h"

namespace dpt {

// Replaces every BatchNorm1d/2d/3d below `model` by a SyncBatchNorm over `comm` and returns how
// many were replaced. `model` itself must not be a batch norm (there is nothing to swap it in).
int convert_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<dist::Communicator> comm);

}  // namespace dpt
