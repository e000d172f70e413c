#pragma once
// The collectives everything above the dist layer uses, each bounded by a timeout and failing with
// a message that names this rank, the operation and what to do.
//
//   auto comm = dpt::dist::init_process_group();        // env:// by default
//   comm->all_reduce(grad, dpt::dist::ReduceOp::Mean);   // in place
//   auto parts = comm->all_gather(correct);              // one tensor per rank
//   double loss = comm->reduce_value(local_loss);        // mean over ranks
//   auto work = comm->all_reduce_async(bucket);          // overlap with other work
//   work.wait();
//
// A Communicator wraps one c10d backend (Gloo or NCCL). Backend gaps (Gloo has no AVG, and no
// bfloat16 before LibTorch 2.3) are filled here, so callers never see them. all_reduce travels
// through the transport chosen at construction (transport/transport.h): when all ranks share a
// host, float tensors go through shared memory instead of Gloo's loopback TCP.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/collective.h"
#include "dptrain/dist/transport/transport.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

// An operation in flight. wait() blocks until it completes, at most for the communicator's
// timeout, finishes any fix-up (divide for Mean, cast back from float32) and throws DistError or
// TimeoutError on failure. Move-only; waiting twice is a no-op.
class Work {
 public:
  Work() = default;
  Work(compat::WorkPtr work, std::function<void()> finish, std::string what, int rank,
       std::chrono::milliseconds timeout);
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool valid() const { return static_cast<bool>(work_); }

 private:
  compat::WorkPtr work_;
  std::function<void()> finish_;
  std::string what_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_{0};
};

struct CommunicatorOptions {
  // Bound on every collective.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // Where this backend's tensors live: CPU for Gloo, this rank's GPU for NCCL.
  TORCH_ARG(at::Device, device) = at::kCPU;
  // The rendezvous store, kept alive as long as the communicator (on rank 0 it is the server the
  // other ranks talk to). Null for a communicator built around a bare backend.
  TORCH_ARG(compat::StorePtr, store);
  // Try shared memory for all_reduce when every rank is on this host (needs `store`).
  TORCH_ARG(bool, shared_memory) = false;
};

class Communicator {
 public:
  // Collective when options.shared_memory(): every rank constructs its communicator at the same
  // point, since the ranks agree on the transport (transport::make_transport).
  Communicator(compat::BackendPtr backend, WorldInfo world, const CommunicatorOptions& options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return world_.rank; }
  int size() const { return world_.world_size; }
  const WorldInfo& world() const { return world_; }
  std::string backend_name() const;
  // How all_reduce travels: "gloo", "gloo + shared memory", or why shared memory is not used.
  std::string transport() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  at::Device device() const { return device_; }

  // In place: every rank ends with op(tensor over ranks). A mean is divided where the transport
  // does it best; once the work completes, the tensor holds it.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(at::Tensor tensor, ReduceOp op = ReduceOp::Sum);

  // In place: every rank ends with root's tensor.
  void broadcast(at::Tensor& tensor, int root = 0);
  Work broadcast_async(at::Tensor tensor, int root = 0);

  // One tensor per rank, in rank order; every rank's input must have the same shape and dtype.
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);

  // This rank's slice (along dim 0, size/world rows) of op(tensor over ranks).
  at::Tensor reduce_scatter(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);

  // Returns once every rank has reached it.
  void barrier();

  // The tutorials' reduce_value(value, average): the sum over ranks, or the mean when `average`.
  double reduce_value(double value, bool average = true);
  at::Tensor reduce_value(const at::Tensor& value, bool average = true);

  // The rendezvous store (null when the communicator was built around a bare backend).
  const compat::StorePtr& store() const { return store_; }

  // The wrapped c10d backend, for callers that need an operation not offered above.
  compat::Backend& backend() { return *backend_; }

 private:
  Work start_all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what);

  compat::BackendPtr backend_;
  WorldInfo world_;
  std::chrono::milliseconds timeout_;
  at::Device device_;
  compat::StorePtr store_;
  std::unique_ptr<transport::Transport> transport_;
};

}  // namespace dpt::dist
