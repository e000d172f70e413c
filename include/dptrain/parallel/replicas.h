#pragma once
// Keeping model replicas identical across ranks: a check that every rank built the same model,
// and a broadcast of many tensors in a few collectives.
//
//   dpt::verify_replicas(comm, dpt::describe_module(*model), "DistributedDataParallel");
//   dpt::broadcast_coalesced(comm, model->buffers(), /*root=*/0);

#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dptrain/dist/communicator.h"

namespace dpt {

// One line per parameter and buffer: kind, name, shape and dtype, in registration order.
std::vector<std::string> describe_module(const torch::nn::Module& module);

// Compares every rank's description with rank 0's. On a difference, every rank throws the same
// ConfigError naming the first differing line and the ranks involved (two collectives; no rank
// is left waiting). `what` names the caller in the message.
void verify_replicas(dist::Communicator& comm, const std::vector<std::string>& description,
                     const std::string& what);

// Every rank ends with root's values in `tensors` (written in place, without autograd), using
// one broadcast per dtype.
void broadcast_coalesced(dist::Communicator& comm, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace dpt
