#pragma once
// hvd::Context: one rank's membership of a Horovod-style job, and its named collectives. Each
// collective first compares a one-line signature of its input across ranks, so that a rank that
// passes another name, shape or dtype makes every rank fail with the same message rather than
// leave its peers blocked in a collective of the wrong size.
//
//   dpt::hvd::Context ctx(comm);
//   auto mean = ctx.allreduce(local_accuracy, "val_accuracy");

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/ordered_dict.h>

#include "dptrain/common/environment.h"
#include "dptrain/dist/communicator.h"
#include "dptrain/dist/init.h"

namespace dpt::hvd {

using NamedTensors = torch::OrderedDict<std::string, at::Tensor>;

enum class ReduceOp { Average, Sum, Min, Max };
std::string to_string(ReduceOp op);

// Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD): 64 MiB.
constexpr int64_t kDefaultFusionThresholdBytes = 64 * 1024 * 1024;

class Context {
 public:
  // Joins the job described by the environment (dptrain launch / torchrun variables, Slurm,
  // OpenMPI; see dist/world.h) and `options`. HOROVOD_FUSION_THRESHOLD (bytes) sets the default
  // fusion threshold.
  static std::shared_ptr<Context> create(const dist::InitOptions& options = dist::InitOptions(),
                                         const Environment& env = Environment::current());

  // Over an existing communicator.
  explicit Context(std::shared_ptr<dist::Communicator> comm,
                   int64_t fusion_threshold_bytes = kDefaultFusionThresholdBytes);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int local_rank() const { return comm_->world().local_rank; }
  int local_size() const { return comm_->world().local_world_size; }
  const std::shared_ptr<dist::Communicator>& communicator() const { return comm_; }
  // The fusion threshold DistributedOptimizers use unless their options name one.
  int64_t fusion_threshold_bytes() const { return fusion_threshold_bytes_; }

  // op over ranks of `tensor`, as a new tensor on `tensor`'s device.
  at::Tensor allreduce(const at::Tensor& tensor, const std::string& name, ReduceOp op = ReduceOp::Average) const;
  // Every rank's `tensor` concatenated along dimension 0, in rank order. First dimensions may
  // differ between ranks; the other dimensions and the dtype must not. A 0-dim tensor counts as
  // one row.
  at::Tensor allgather(const at::Tensor& tensor, const std::string& name) const;
  // `root_rank`'s tensor, as a new tensor on `tensor`'s device.
  at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name) const;

  // Agreement checks for collectives built on the context: `lines` describe this rank's input;
  // when any rank's differ, every rank throws the same ConfigError naming `operation`, `name`
  // (may be empty), the ranks and the first difference, followed by `rule`.
  void check_agreement(const std::string& operation, const std::string& name,
                       const std::vector<std::string>& lines, const std::string& rule) const;
  // Every rank checks that `root_rank` exists, with the same ConfigError.
  void check_root(const std::string& operation, const std::string& name, int root_rank) const;

 private:
  std::shared_ptr<dist::Communicator> comm_;
  int64_t fusion_threshold_bytes_;
};

}  // namespace dpt::hvd
