#pragma once
// How all_reduce travels between ranks: one small interface, one folder per way with the same file
// names (process_group/transport.h: the c10d backend itself, Gloo or NCCL; shm/transport.h: shared
// memory between ranks of one host), and one factory that picks, used by init_process_group and by
// the tests' thread ranks alike. The communicator owns the transport it was built with and sends
// every all_reduce through it; its other collectives use the c10d backend directly.
//
//   auto transport = dpt::dist::transport::make_transport(
//       backend, world, dpt::dist::transport::TransportOptions().shared_memory(true).store(store));
//   transport->all_reduce(bucket, dpt::dist::ReduceOp::Mean, record)->wait(timeout);
//   std::cout << transport->describe();   // "gloo + shared memory"
//
// The parameter server's point-to-point traffic will go through this seam too.

#include <chrono>
#include <memory>
#include <string>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/collective.h"
#include "dptrain/dist/flight_recorder.h"
#include "dptrain/dist/world.h"

namespace dpt::dist::transport {

class Transport {
 public:
  virtual ~Transport() = default;

  // For Communicator::transport(): "gloo", "gloo + shared memory", or why shared memory is not used.
  virtual std::string describe() const = 0;

  // Starts op over `tensor`, in place. `tensor` is contiguous and of a type the c10d backend
  // reduces. When the work completes the result is final, Mean included: each transport divides
  // where it costs least (shared memory while it sums; Gloo, which has no average, before it sends,
  // on the calling thread, as PyTorch's reducer does; NCCL natively). `record` is the flight
  // recorder's entry for it: a transport that can checks that every rank's says the same (the
  // step, the shape) before it reduces anything.
  virtual compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) = 0;

  // Whether all_reduce of tensors like `like` runs through memory the ranks share. Then the
  // communicator gathers them through it too (all_gather below) and reduce-scatters them as a
  // whole sum and a slice, which there costs about a copy in and out per rank; over a network that
  // sum would carry world times the bytes of a true reduce_scatter.
  virtual bool reduces_in_shared_memory(const at::Tensor& /*like*/) const { return false; }

  // Where reduces_in_shared_memory(input): every rank's `input` (contiguous) into `output` (world x
  // its size, rank r's at r x size). Other transports leave gathers to the c10d backend.
  virtual compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record);

  // An operation that runs out of time fails within this long after its timeout, with an error
  // that names the peer it waited for; whoever waits on it gives it that much more.
  virtual std::chrono::milliseconds failure_report_delay() const { return std::chrono::milliseconds(0); }
};

struct TransportOptions {
  // Bound on setting up and on each operation.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // Float CPU all_reduce through shared memory when every rank of the world runs on this host
  // (LOCAL_WORLD_SIZE equals WORLD_SIZE). Requires `store`.
  TORCH_ARG(bool, shared_memory) = false;
  // The rendezvous store, through which the ranks agree on shared memory.
  TORCH_ARG(compat::StorePtr, store);
  // Over Gloo, compare every rank's record of each all_reduce first (one small all_gather): a
  // skipped collective or a different shape fails at once with each rank's, instead of summing the
  // wrong tensors or aborting inside Gloo.
  TORCH_ARG(bool, check_agreement) = true;
};

// Collective when options.shared_memory() and every rank is on this host: every rank calls it at
// the same point and all of them get the same kind of transport. Without shared memory, what
// travels through `backend` says why in describe().
std::unique_ptr<Transport> make_transport(compat::BackendPtr backend, const WorldInfo& world,
                                          const TransportOptions& options = {});

}  // namespace dpt::dist::transport
