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
//   comm->send(message, /*peer=*/2, /*tag=*/7);          // point to point, matched by tag
//
// Every collective and every send and recv is recorded in the communicator's flight recorder
// (flight_recorder.h), and every byte between ranks passes here, so that no exchange escapes the
// bound, the record or the classified error. When a collective times out, the ranks that timed
// out ask each other through the store how far each got, and the error names the rank that did
// not arrive; the recorder's entries are printed to `failure_log` before the error is thrown.
//
// A Communicator wraps one c10d backend (Gloo or NCCL) in the transport chosen at construction
// (transport/transport.h), through which every operation travels: when all ranks share a host,
// float tensors are reduced and gathered through shared memory instead of Gloo's loopback TCP.
// Backend gaps (Gloo has no AVG, and no bfloat16 before LibTorch 2.3) are filled here and in the
// transport, so callers never see them.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/common/log_stream.h"
#include "dptrain/compat/compat.h"
#include "dptrain/dist/abandonment.h"
#include "dptrain/dist/collective.h"
#include "dptrain/dist/flight_recorder.h"
#include "dptrain/dist/transport/transport.h"
#include "dptrain/dist/world.h"

namespace dpt::dist {

class Communicator;

// An operation in flight. wait() blocks until it completes, at most for the communicator's
// timeout, finishes any fix-up (divide for Mean, cast back from float32) and throws DistError or
// TimeoutError on failure. Move-only; waiting twice is a no-op.
class Work {
 public:
  using Clock = std::chrono::steady_clock;

  Work() = default;
  // `id` is the operation's entry in `comm`'s flight recorder; `comm` outlives the Work.
  Work(compat::WorkPtr work, std::function<void()> finish, Communicator* comm, uint64_t id, std::string what,
       std::chrono::milliseconds timeout);
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool valid() const { return static_cast<bool>(work_); }

  // When the operation completed: when the backend finished it, where the backend says so as it
  // happens (Gloo, shared memory), else when wait() returned (NCCL's host-side work completes at
  // launch; its GPU work is only known finished once waited). Clock::time_point{} before either.
  Clock::time_point completed_at() const {
    return completed_ ? Clock::time_point(Clock::duration(completed_->load())) : Clock::time_point{};
  }

 private:
  friend class Communicator;
  // Stamps the completion as the backend reports it, from the backend's thread.
  void watch_completion();

  compat::WorkPtr work_;
  // Steady-clock ticks of the completion, 0 until known; shared with the backend's callback.
  std::shared_ptr<std::atomic<Clock::rep>> completed_ = std::make_shared<std::atomic<Clock::rep>>(0);
  std::function<void()> finish_;
  Communicator* comm_ = nullptr;
  uint64_t id_ = 0;
  std::string what_;
  std::chrono::milliseconds timeout_{0};  // the wait's: the communicator's and a transport's grace
  bool abandonable_ = true;  // a collective's wait; a point-to-point one is never cut short (start())
};

struct CommunicatorOptions {
  // Bound on every collective.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // Where this backend's tensors live: CPU for Gloo, this rank's GPU for NCCL.
  TORCH_ARG(at::Device, device) = at::kCPU;
  // The rendezvous store, kept alive as long as the communicator (on rank 0 it is the server the
  // other ranks talk to). Null for a communicator built around a bare backend.
  TORCH_ARG(compat::StorePtr, store);
  // How the operations travel (transport/transport.h): shared memory on one host, the hierarchy
  // across machines (both need `store`), and over Gloo the agreement check before every collective
  // (a rank that skipped a collective or has another shape fails every rank at once, naming each
  // one's, instead of summing the wrong tensors or aborting inside Gloo). Its timeout, store and
  // abandonment are the communicator's own.
  TORCH_ARG(transport::TransportOptions, transport) = {};
  // How many recent collectives the flight recorder keeps (about three training steps' worth).
  TORCH_ARG(size_t, flight_recorder_size) = 16;
  // Where a failing collective prints the flight recorder's entries; null: nowhere.
  TORCH_ARG(LogStream, failure_log) = &std::cerr;
};

class Communicator {
 public:
  // Collective where the transport may be shared memory or hierarchical: every rank constructs its
  // communicator at the same point, since the ranks agree on the transport (transport::make_transport).
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
  // The same into `output` (a contiguous tensor of that slice's shape), started. Where the backend
  // has no reduce_scatter (Gloo before 2.x, and every float CPU tensor when the ranks share memory,
  // whose transport all-reduces faster than Gloo scatters), `tensor` is all-reduced in place, so it
  // must be contiguous and is left holding the whole result.
  Work reduce_scatter_async(at::Tensor tensor, at::Tensor output, ReduceOp op = ReduceOp::Sum);

  // Returns once every rank has reached it.
  void barrier();

  // Point to point, as c10d's send/recv: `tensor` goes to (comes from) rank `peer`, whose recv
  // (send) names the same `tag`. Bounded by the timeout like the collectives; a failure names the
  // peer and the tag (no survey of the other ranks: only the peer takes part). Operations on one
  // pair and tag arrive in the order they were started; different tags and peers may be in flight
  // at once, from several threads.
  Work send_async(at::Tensor tensor, int peer, int tag = 0);
  Work recv_async(at::Tensor tensor, int peer, int tag = 0);
  void send(const at::Tensor& tensor, int peer, int tag = 0);
  void recv(at::Tensor& tensor, int peer, int tag = 0);

  // The tutorials' reduce_value(value, average): the sum over ranks, or the mean when `average`.
  double reduce_value(double value, bool average = true);
  at::Tensor reduce_value(const at::Tensor& value, bool average = true);

  // The rendezvous store (null when the communicator was built around a bare backend).
  const compat::StorePtr& store() const { return store_; }

  // This rank's recent collectives; set_step() on it tags the entries with the caller's step.
  FlightRecorder& flight_recorder() { return recorder_; }

  // Ends this rank's waits on the group, from another thread, once armed (abandonment.h): every
  // operation's wait, and the agreement check's, then throws GroupAbandoned. Shared, so that a
  // watcher (the heartbeat's thread) may hold it past the communicator.
  const std::shared_ptr<Abandonment>& abandonment() const { return abandonment_; }

 private:
  friend class Work;
  enum class PointToPoint { Send, Recv };
  // Starts an operation on the transport, given the flight recorder's record of it.
  using Launch = std::function<compat::WorkPtr(const CollectiveRecord&)>;

  // What travels on the wire for `tensor`: itself when the transport can reduce it in place, else a
  // contiguous (and, for a type the transport cannot reduce, float32) copy, written back afterwards.
  at::Tensor wire_tensor(const at::Tensor& tensor) const;
  // `then` runs once the result is in `tensor`.
  Work start_all_reduce(at::Tensor tensor, ReduceOp op, std::function<void()> then = {});
  Work start_point_to_point(PointToPoint direction, at::Tensor tensor, int peer, int tag);
  // Records `operation` on `described` (undefined for a barrier; `peer` for point to point) and
  // starts it with `launch`; a failure to start goes through fail() as one to finish does, named
  // `what`. `finish` as Work's.
  Work start(const std::string& operation, const std::string& what, const at::Tensor& described, int peer,
             const Launch& launch, std::function<void()> finish = {});
  // Marks the flight recorder's entry `id` failed, finds the ranks that did not arrive when a
  // collective timed out, prints the flight recorder to the failure log, and throws the error
  // that names all of it.
  [[noreturn]] void fail(uint64_t id, const std::string& what, std::exception_ptr cause,
                         std::chrono::milliseconds waited);

  WorldInfo world_;
  std::chrono::milliseconds timeout_;
  at::Device device_;
  compat::StorePtr store_;
  FlightRecorder recorder_;
  std::ostream* failure_log_;
  std::shared_ptr<Abandonment> abandonment_ = std::make_shared<Abandonment>();
  // Declared last, destroyed first: its threads finish or fail what is queued, and the backend
  // shuts down, while the rest of the communicator is still whole.
  std::unique_ptr<transport::Transport> transport_;
};

// Keeps `group` alive, and never destroys it, until the process ends: once abandoned for a lost
// peer, its backend's threads may wait on the peer's socket until the collective timeout, and
// destroying the group (Gloo's destructor joins them) would wait as long; the process's exit ends
// them instead. For groups that the ranks left to form a new one (--on-failure continue).
void retire(std::shared_ptr<Communicator> group);

}  // namespace dpt::dist
