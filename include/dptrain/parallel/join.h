#pragma once
// Uneven inputs: a rank whose data runs out first keeps the other ranks' collectives company until
// every rank is done, instead of leaving them waiting in a collective forever; PyTorch's
// torch.distributed.algorithms.Join does the same.
//
//   dpt::DistributedDataParallel ddp(model, comm);
//   dpt::Join join({&ddp});
//   for (auto& [x, y] : my_shard) {                // shards of different lengths
//     auto loss = cross_entropy(ddp->forward(x), y);  // a training forward announces this rank's step
//     loss.backward();
//     optimizer.step();
//   }
//   join.finish();  // shadows the others' steps until all are here; then every rank holds the same model
//
// How: each training step of a rank still in its loop starts with one small all-reduce saying so;
// a rank in finish() answers that all-reduce with "done" and, while some rank is still training,
// runs the collectives of one step with contributions that change nothing (a joinable's
// shadow_step). DistributedDataParallel's shadow step is a real forward and backward of an empty
// batch shaped like its last one, so every collective inside the model (SyncBatchNorm's included,
// which PyTorch's Join does not support) runs in the same order as on the training ranks, with a
// count of zero. Gradients stay the mean over the whole world, a finished rank counting as zero
// (PyTorch's divide_by_initial_world_size=True), and buffers are broadcast from the highest rank
// still training. At the end the rank that trained longest (the highest on a tie) sends its
// parameters and buffers to all.
//
// Inside a Join, other per-step collectives of the loop (a metric all-reduce, no_sync()
// accumulation) have no shadow: keep them outside it or after finish().

#include <cstdint>
#include <vector>

#include "dptrain/dist/communicator.h"

namespace dpt {

class Join;

// What Join needs of a participant; DistributedDataParallel is one.
class Joinable {
 public:
  virtual ~Joinable() = default;

  // Runs the collectives of one step of the ranks still training, contributing nothing to them.
  virtual void shadow_step() = 0;
  // Once every rank has joined: takes `root`'s state (parameters, buffers). Collective.
  virtual void take_final_state(int root) = 0;
  virtual dist::Communicator& join_communicator() const = 0;

 protected:
  // The Join this participant takes part in, or null outside one.
  Join* active_join() const { return join_; }

 private:
  friend class Join;
  Join* join_ = nullptr;
};

class Join {
 public:
  // The joinables share one communicator. They belong to this Join until it is destroyed.
  explicit Join(std::vector<Joinable*> joinables);
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Called by a joinable at the start of each training step of this rank: one all-reduce of a
  // world-sized vector of flags, which tells every rank who still trains. Collective.
  void announce_step();
  // The highest rank still training at the last step announced or shadowed (0 before any): whose
  // buffers the others take.
  int authoritative_rank() const { return authoritative_rank_; }
  // Steps this rank announced.
  int64_t steps() const { return steps_; }

  // Shadows the other ranks' steps until every rank has called finish(), then gives every rank
  // the state of the rank with the most steps. Returns the number of steps shadowed. Collective.
  int64_t finish();

 private:
  // The all-reduce of who still trains; returns how many do.
  int64_t exchange(bool training);

  std::vector<Joinable*> joinables_;
  dist::Communicator& comm_;
  int64_t steps_ = 0;
  int authoritative_rank_ = 0;
  bool finished_ = false;
};

}  // namespace dpt
