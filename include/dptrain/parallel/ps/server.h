#pragma once
// The server side of the parameter server: one process of the job holding a shard of every bucket
// (shard_layout.h) and its optimizer state, updating it with the workers' gradients.
//
//   dpt::ps::Roles roles(comm->size(), /*servers=*/1);
//   if (roles.is_server(comm->rank())) {
//     dpt::ps::ParameterServer server(params, comm, options, dpt::ps::SgdRule().momentum(0.9));
//     auto report = server.serve();   // until every worker has stopped (or, async, left)
//     return;
//   }
//
// serve() first takes its starting weights (and momentum, when resuming) from rank 0, then runs one
// session per worker, each receiving that worker's pushes in bucket order and answering each with
// the chunk's weights. Consistency::Sync averages a bucket's pushes from every worker before one
// update; Async applies each as it comes; Bounded applies each as it comes and holds back the
// answer to a worker's last bucket of step c until every worker has pushed step c - K.
//
// When a worker fails under Async or Bounded, its session ends, the server says so on
// PsOptions::log and serves the others. Under Sync the step cannot be completed without it:
// serve() throws, naming the worker.

#include <memory>
#include <vector>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/ps/options.h"

namespace dpt::ps {

struct ServerReport {
  int rank = 0;         // this server's rank in the job
  int64_t updates = 0;  // gradient chunks applied (Sync: one per bucket and step)
  // The most steps any worker had pushed beyond the slowest active worker when it was answered.
  int64_t max_lead = 0;
  std::vector<int> workers_lost;  // ranks of the workers whose session failed
};

class ParameterServer {
 public:
  // `world`: the whole job (workers and servers); this process is one of Roles' servers.
  // `params`: the model's trainable parameters in registration order, as every worker passes them.
  ParameterServer(const std::vector<ServedParameter>& params, std::shared_ptr<dist::Communicator> world,
                  PsOptions options, SgdRule sgd);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  ServerReport serve();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the sessions' threads
};

}  // namespace dpt::ps
