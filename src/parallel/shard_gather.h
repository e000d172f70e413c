#pragma once
// What the ZeRO optimizers share: parameters seen as flat memory, and the gather that brings
// every rank the parts of the weights the other ranks stepped.
//
//   std::vector<std::vector<at::Tensor>> parts(world);   // rank r's parts, flat, in a fixed order
//   parts[owner].push_back(flat_storage(param));
//   gather_shards(comm, parts);                           // every rank's parts now hold the owners'

#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "dptrain/dist/communicator.h"

namespace dpt::detail {

// A dense tensor's elements in memory order, as one flat tensor sharing its storage: a
// channels_last weight is laid out alike on every rank, so its memory order travels as is.
at::Tensor flat_storage(const at::Tensor& dense);
// Elements [from, from + length) of flat_storage(dense), as a tensor of its own over the same
// memory (not an autograd view: an optimizer may detach_() a gradient).
at::Tensor flat_slice(const at::Tensor& dense, int64_t from, int64_t length);

// Collective: `parts[r]`, rank r's flat tensors laid end to end, is copied from rank r into every
// other rank's same tensors. The ranks' lengths may differ; every rank passes the same layout.
// They travel in pieces of at most kGatherPiece elements a rank, one all_gather a piece, so the
// buffers in flight are (world + 1) pieces rather than (world + 1) shards, which at 4 ranks would
// outweigh the optimizer state that sharding saves.
void gather_shards(dist::Communicator& comm, const std::vector<std::vector<at::Tensor>>& parts);

// ConfigError naming `kind` (the optimizer's class) unless every parameter is dense (gathered as
// flat memory) and all share one dtype and device (gathered through one buffer).
void check_gatherable(const std::vector<torch::optim::OptimizerParamGroup>& groups, int rank, const char* kind);

// Steps `local`, the optimizer over this rank's shard whose groups mirror `groups`, with the
// options of `groups` (the lr a schedule set there).
void step_shard(const std::vector<torch::optim::OptimizerParamGroup>& groups, torch::optim::Optimizer& local);

// What a sharded optimizer's save() and load() throw: an archive would hold one rank's shard, which
// no optimizer could load. `kind`: the class's name.
[[noreturn]] void refuse_archive(int rank, const char* kind, bool saving);

// 4 MiB of float32 a rank and piece: large enough that a collective's fixed cost is small beside
// its bytes.
constexpr int64_t kGatherPiece = int64_t{1} << 20;

}  // namespace dpt::detail
