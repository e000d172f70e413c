#pragma once
// How bytes travel between ranks: every collective and every point-to-point operation the
// Communicator offers goes through one small interface, as c10d's ProcessGroup has them, with one
// folder per way and the same file names (process_group/transport.h: the c10d backend itself, Gloo
// or NCCL; shm/transport.h: shared memory between ranks of one host, the backend for the rest),
// and one factory that picks, used by init_process_group and by the tests' thread ranks alike.
// The communicator owns the transport it was built with and calls nothing else: the agreement
// check, the flight recorder and the bound wrap every operation in one place.
//
//   auto transport = dpt::dist::transport::make_transport(
//       backend, world, dpt::dist::transport::TransportOptions().shared_memory(true).store(store));
//   transport->all_reduce(bucket, dpt::dist::ReduceOp::Mean, record)->wait(timeout);
//   transport->send(message, /*peer=*/1, /*tag=*/7)->wait(timeout);
//   std::cout << transport->describe();   // "gloo + shared memory"
//
// Tensors reach a transport contiguous and of a type it reduces (reduces()); the communicator
// converts the others. Collectives carry their flight-recorder `record`: a transport that can
// checks that every rank's says the same (the step, the shape) before it moves anything.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <torch/arg.h>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/abandonment.h"
#include "dptrain/dist/collective.h"
#include "dptrain/dist/flight_recorder.h"
#include "dptrain/dist/world.h"

namespace dpt::dist::transport {

class Transport {
 public:
  virtual ~Transport() = default;

  // For Communicator::transport(): "gloo", "gloo + shared memory", or why shared memory is not used.
  virtual std::string describe() const = 0;
  // The c10d backend underneath: "gloo" or "nccl".
  virtual std::string backend_name() const = 0;

  // Whether tensors of `type` travel as they are (else the communicator sends them as float32).
  virtual bool reduces(at::ScalarType type) const = 0;
  // Whether reduce_scatter() of tensors like `like` with `op` is a true reduce-scatter here; where
  // not, the communicator all-reduces the whole tensor and keeps its slice.
  virtual bool scatters(const at::Tensor& like, ReduceOp op) const = 0;

  // Starts op over `tensor`, in place. When the work completes the result is final, Mean
  // included: each transport divides where it costs least (shared memory while it sums; Gloo,
  // which has no average, before it sends, on the calling thread, as PyTorch's reducer does;
  // NCCL natively).
  virtual compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) = 0;
  // Every rank ends with `root`'s `tensor`.
  virtual compat::WorkPtr broadcast(at::Tensor tensor, int root, const CollectiveRecord& record) = 0;
  // Every rank's `input` into `output` (world x its size, rank r's at r x size, contiguous).
  virtual compat::WorkPtr all_gather(at::Tensor input, at::Tensor output, const CollectiveRecord& record) = 0;
  // Where scatters(input, op): this rank's slice of op(input over ranks), `input`'s dim 0 cut into
  // world equal parts, into `output`.
  virtual compat::WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op,
                                         const CollectiveRecord& record) = 0;
  // Point to point: operations on one pair and tag arrive in the order they were started.
  virtual compat::WorkPtr send(at::Tensor tensor, int peer, int tag) = 0;
  virtual compat::WorkPtr recv(at::Tensor tensor, int peer, int tag) = 0;

  // An operation that runs out of time fails within this long after its timeout, with an error
  // that names the peer it waited for; whoever waits on it gives it that much more.
  virtual std::chrono::milliseconds failure_report_delay() const { return std::chrono::milliseconds(0); }
};

// Makes a backend for a group of the job's ranks on `store`, in which this rank is `rank` of
// `size`: the machines' leaders' group of the hierarchical allreduce (init_process_group's makes
// a Gloo group on the job's network interface).
using GroupBackendFactory = std::function<compat::BackendPtr(const compat::StorePtr& store, int rank, int size)>;

struct TransportOptions {
  // Bound on setting up and on each operation.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // Float CPU all_reduce through shared memory when every rank of the world runs on this host
  // (LOCAL_WORLD_SIZE equals WORLD_SIZE). Requires `store`.
  TORCH_ARG(bool, shared_memory) = false;
  // Float CPU all_reduce through shared memory on each machine and across machines by one rank of
  // each (hierarchical/transport.h), when the ranks span machines and one of them runs several.
  // Needs shared_memory, `store` and `group_backend`; every rank must want it, or none takes it.
  TORCH_ARG(bool, hierarchical) = false;
  // Makes the machines' leaders' group for the hierarchical allreduce.
  TORCH_ARG(GroupBackendFactory, group_backend);
  // The rendezvous store, through which the ranks agree on shared memory and on the machines.
  TORCH_ARG(compat::StorePtr, store);
  // Over Gloo, compare every rank's record of each all_reduce first (one small all_gather): a
  // skipped collective or a different shape fails at once with each rank's, instead of summing the
  // wrong tensors or aborting inside Gloo.
  TORCH_ARG(bool, check_agreement) = true;
  // The communicator's: the agreement check's wait leaves once it is abandoned (armed). Null: the
  // backend's own wait.
  TORCH_ARG(std::shared_ptr<const Abandonment>, abandonment);
};

// Collective: every rank calls it at the same point and all of them get the same kind of transport
// (the ranks agree on shared memory and on the machines, and ask Gloo which types it reduces).
// Without shared memory or the hierarchy, what travels through `backend` says why in describe().
std::unique_ptr<Transport> make_transport(compat::BackendPtr backend, const WorldInfo& world,
                                          const TransportOptions& options = {});

}  // namespace dpt::dist::transport
