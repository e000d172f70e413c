#pragma once
// What the parameter server's two sides agree on: the roles of a job's processes, the consistency
// model, and the parameters served.

#include <ATen/ATen.h>
#include <torch/arg.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "dptrain/common/log_stream.h"
#include "dptrain/dist/collective.h"
#include "dptrain/parallel/reducer.h"

namespace dpt::ps {

// When a server applies the workers' gradients, and when a worker may go on.
enum class Consistency {
  // Each step's gradients from every worker are averaged, then applied once: DDP's mathematics.
  Sync,
  // Each worker's gradient is applied as it arrives (scaled by 1/workers, so that a round of
  // pushes moves the weights as far as a synchronous step), and the worker goes on at once with
  // whatever weights the shard holds then (Downpour SGD, MXNet's dist_async).
  Async,
  // As Async, but a worker that has pushed step c waits until every worker has pushed step c - K
  // (stale synchronous parallel, K = PsOptions::staleness).
  Bounded,
};

// "sync", "async", "bounded"; ConfigError otherwise.
Consistency parse_consistency(const std::string& name);
std::string to_string(Consistency consistency);

// A job of `world_size` processes split into workers (ranks 0 .. workers-1) and servers (the last
// `servers` ranks): rank 0 stays a worker, so it keeps writing logs and checkpoints.
struct Roles {
  Roles(int world_size, int servers);

  int workers() const { return world_size - servers; }
  bool is_server(int rank) const { return rank >= workers(); }
  int server_rank(int server) const { return workers() + server; }
  int server_index(int rank) const { return rank - workers(); }

  int world_size;
  int servers;
};

// SGD as torch.optim.SGD computes it, run by the servers on their shards.
struct SgdRule {
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, dampening) = 0;
  TORCH_ARG(bool, nesterov) = false;
};

struct PsOptions {
  // Processes of the job that serve (the last ranks); the rest are workers.
  TORCH_ARG(int, servers) = 1;
  TORCH_ARG(Consistency, consistency) = Consistency::Sync;
  // Consistency::Bounded: how many steps a worker may run ahead of the slowest.
  TORCH_ARG(int, staleness) = 0;
  // How the gradients are cut into pushes: the reducer's buckets (first, rest, last caps), each
  // bucket split evenly over the servers. Both sides must be given the same.
  TORCH_ARG(ReducerOptions, buckets) = {};
  // Bound on a server's waits for the other workers (a synchronous step's pushes, a bounded
  // worker's lead). The transfers are bounded by the job Communicator's timeout, for which a
  // server waits for a worker's next push, so that one must cover a worker's validation pass.
  TORCH_ARG(std::chrono::milliseconds, timeout) = dist::kDefaultTimeout;
  // Where a server reports workers that left. Null: nowhere.
  TORCH_ARG(LogStream, log) = &std::cerr;
};

// A parameter as both sides see it: the worker's tensor (its shape and, on rank 0, its starting
// value) and the weight decay the server applies to it.
struct ServedParameter {
  std::string name;
  at::Tensor tensor;
  double weight_decay = 0;
};

// The parameters' tensors, in order.
std::vector<at::Tensor> served_tensors(const std::vector<ServedParameter>& params);

}  // namespace dpt::ps
