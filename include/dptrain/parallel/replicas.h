#pragma once
// Keeping model replicas identical across ranks: a check that every rank built the same model,
// and a broadcast of many tensors in a few collectives.
//
//   dpt::verify_replicas(comm, dpt::describe_module(*model), "DistributedDataParallel");
//   dpt::broadcast_coalesced(comm, model->buffers(), /*root=*/0);

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dptrain/dist/communicator.h"

namespace dpt {

// One line per parameter and buffer: kind, name, shape and dtype, in registration order.
std::vector<std::string> describe_module(const torch::nn::Module& module);

// The first place where some rank's lines differ from rank 0's.
struct Disagreement {
  int rank = 0;                  // the lowest rank that differs from rank 0
  size_t entry = 0;              // index of the first differing line
  std::string on_root;           // rank 0's line there ("nothing (no more entries)" past its end)
  std::string on_rank;           // that rank's line there
  size_t root_lines = 0, rank_lines = 0;
};

// Compares every rank's lines with rank 0's (two collectives); every rank gets the same answer,
// so all of them can fail together.
std::optional<Disagreement> compare_with_root(dist::Communicator& comm, const std::vector<std::string>& lines);

// Compares every rank's description with rank 0's. On a difference, every rank throws the same
// ConfigError naming the first differing line and the ranks involved (two collectives; no rank
// is left waiting). `what` names the caller in the message.
void verify_replicas(dist::Communicator& comm, const std::vector<std::string>& description,
                     const std::string& what);

// Every rank ends with root's values in `tensors` (written in place, without autograd), using
// one broadcast per dtype.
void broadcast_coalesced(dist::Communicator& comm, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace dpt
