#pragma once
// The worker side of the parameter server. Gradients leave during backward, bucket by bucket as
// the reducer fills them (reducer.h), each bucket cut into one chunk per server; each server
// answers with its chunk's updated weights, which synchronize() writes into the parameters. The
// workers never run the optimizer: the servers do.
//
//   dpt::ps::ParameterServerClient client(params, comm, options);   // ranks 0 .. workers-1
//   client.start();                        // rank 0 seeds the servers; every worker takes their weights
//   for (auto& batch : loader) {
//     client.prepare_for_backward(lr, step);
//     loss(model->forward(batch)).backward();   // pushes overlap with backward
//     client.synchronize();                // the servers' weights are now the model's
//   }
//   client.stop();                         // or let the destructor tell the servers
//
// Every transfer is a send or recv of the job's Communicator: bounded by its timeout, recorded in
// its flight recorder, and failing with an error that names this rank, the server rank and the
// bucket.

#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/ps/shard_layout.h"

namespace dpt::ps {

namespace wire {
enum class Request : int32_t;
}  // namespace wire

// The servers' weights and optimizer state, one tensor per parameter, shaped like it; a momentum
// tensor is undefined until the servers have stepped (as torch.optim.SGD's state is empty).
struct ServedState {
  std::vector<at::Tensor> weights;
  std::vector<at::Tensor> momentum;
};

class ParameterServerClient {
 public:
  // `world`: the whole job (workers and servers); this process is one of Roles' workers.
  // `params`: the model's trainable float32 parameters in registration order, as the servers get them.
  ParameterServerClient(std::vector<ServedParameter> params, std::shared_ptr<dist::Communicator> world,
                        PsOptions options);
  ~ParameterServerClient();
  ParameterServerClient(const ParameterServerClient&) = delete;
  ParameterServerClient& operator=(const ParameterServerClient&) = delete;

  // Rank 0 sends its weights and `momentum` (one per parameter, undefined or empty: none yet) as
  // the servers' starting point; then every worker takes the servers' weights. Call once, on
  // every worker, before the first step (after loading a checkpoint).
  void start(const std::vector<at::Tensor>& momentum = {});

  // Arms the next backward to push its gradients, with `lr` as the servers' step size and `step`
  // for the servers' bookkeeping. Without it, backward only accumulates into .grad.
  void prepare_for_backward(double lr, int64_t step);
  // After backward: the pulled weights become the parameters' values (no-op when backward did
  // not push).
  void synchronize();

  // The servers' current weights and momentum. Any worker may ask, between steps.
  ServedState fetch_state();

  // Tells the servers this worker is done. Idempotent; the destructor calls it.
  void stop();

  const ShardLayout& layout() const { return layout_; }
  // Bytes this worker sends in one step's pushes (headers included); it receives the same less
  // the headers.
  int64_t bytes_pushed_per_step() const;

 private:
  // Starts bucket b's pushes and pulls; the returned reduction waits for them.
  PendingReduction push(const GradBucket& bucket);
  // Sends `request` (State or Stop) to every server, on bucket 0's tag.
  void send_request(wire::Request request);
  std::string who() const;

  std::vector<ServedParameter> params_;
  std::shared_ptr<dist::Communicator> world_;
  PsOptions options_;
  Roles roles_;
  ShardLayout layout_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<std::vector<at::Tensor>> outbox_;  // [bucket][server]: header + gradient chunk
  std::vector<at::Tensor> pulled_;               // [bucket]: the servers' weights, flat
  double lr_ = 0;
  int64_t step_ = 0;
  bool pulled_this_step_ = false;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace dpt::ps
