#pragma once
// Where the trainer's ranks meet outside the gradient exchange: the metric sums of every step and
// pass, the validation split, and the barrier that keeps every process alive until rank 0's
// checkpoint of a requested stop is whole. The parallel style decides it (ParallelStyle::lockstep):
// every style steps its ranks together except the asynchronous parameter server, whose ranks
// never wait for each other. Each of them then reports its own steps, rank 0 validates alone, and
// a worker that dies leaves the others training.
//
//   const Lockstep& ranks = style->lockstep();
//   MetricSums all = ranks.sum(local);                   // collective when together()
//   if (ranks.validates()) evaluate(ranks.validation_indices(val->size()));

#include <cstdint>
#include <memory>
#include <vector>

#include "dptrain/dist/communicator.h"
#include "dptrain/train/metrics.h"

namespace dpt::train {

class Lockstep {
 public:
  // `together`: whether the ranks of `comm` take their steps together and meet in collectives.
  Lockstep(std::shared_ptr<dist::Communicator> comm, bool together);

  bool together() const { return together_; }
  // The sums over the ranks (collective), or apart this rank's own.
  MetricSums sum(const MetricSums& local) const;
  int64_t sum(int64_t local) const;
  // Returns once every rank has reached it; apart at once.
  void barrier() const;
  // Whether this rank takes part in validation passes: every rank, or apart rank 0 alone.
  bool validates() const { return together_ || comm_->rank() == 0; }
  // The samples of a validation set of `size` this rank validates: its share, or all of them.
  std::vector<int64_t> validation_indices(int64_t size) const;

 private:
  std::shared_ptr<dist::Communicator> comm_;
  bool together_;
};

}  // namespace dpt::train
