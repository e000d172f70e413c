#pragma once
// Turns signals (SIGTERM and SIGUSR1 by default: Slurm's --signal=USR1@90, scancel, a Kubernetes
// eviction, `dptrain launch` forwarding its own) into a request to stop, for as long as it lives.
// The handler only records the signal; the training loop asks at every step, and the ranks agree
// on one step to stop after. The previous handlers come back when it is destroyed. One at a time
// per process.
//
//   dpt::train::StopSignals stop({SIGTERM, SIGUSR1});
//   while (training) { step(); if (stop.received()) { save(); break; } }

#include <vector>

namespace dpt::train {

class StopSignals {
 public:
  explicit StopSignals(std::vector<int> signals);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal caught since construction; 0 while none has arrived.
  int received() const;

 private:
  void restore();

  struct Previous;
  std::vector<Previous> previous_;
};

}  // namespace dpt::train
