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
// bfloat16 before LibTorch 2.3) are filled here, so callers never see them. When all ranks share
// a host, float all_reduce goes through shared memory instead of Gloo's loopback TCP
// (shared_memory_allreduce.h); init_process_group sets that up.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

class SharedMemoryAllreduce;

enum class ReduceOp { Sum, Mean, Max, Min };
std::string to_string(ReduceOp op);

// The default bound on one collective, as PyTorch's (but enforced: a hung peer ends the job).
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

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

class Communicator {
 public:
  // `device` is where this backend's tensors live: CPU for Gloo, this rank's GPU for NCCL.
  // `store` is the rendezvous store, kept alive as long as the communicator (on rank 0 it is the
  // server the other ranks talk to).
  Communicator(compat::BackendPtr backend, WorldInfo world,
               std::chrono::milliseconds timeout = kDefaultTimeout, at::Device device = at::kCPU,
               compat::StorePtr store = {});
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

  // In place: every rank ends with op(tensor over ranks).
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

  // Whether all_reduce(tensor, Mean) divides while reducing (shared memory) rather than once the
  // sum has arrived, on the thread that waits for it.
  bool averages_while_reducing(const at::Tensor& tensor) const;

  // The tutorials' reduce_value(value, average): the sum over ranks, or the mean when `average`.
  double reduce_value(double value, bool average = true);
  at::Tensor reduce_value(const at::Tensor& value, bool average = true);

  // The rendezvous store (null when the communicator was built around a bare backend).
  const compat::StorePtr& store() const { return store_; }

  // The wrapped c10d backend, for callers that need an operation not offered above.
  compat::Backend& backend() { return *backend_; }

  // From now on, all_reduce of what `local` accepts goes through it. Every rank must make the same
  // call at the same point. Null keeps the backend, and `why_not` says why in transport().
  void use_shared_memory(std::unique_ptr<SharedMemoryAllreduce> local, std::string why_not = {});

 private:
  Work start_all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what);

  compat::BackendPtr backend_;
  WorldInfo world_;
  std::chrono::milliseconds timeout_;
  at::Device device_;
  compat::StorePtr store_;
  std::unique_ptr<SharedMemoryAllreduce> local_;
  std::string no_shared_memory_because_;
};

}  // namespace dpt::dist
