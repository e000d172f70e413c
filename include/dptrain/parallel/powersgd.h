#pragma once
// PowerSGD gradient compression as a communication hook (Vogels et al., "PowerSGD: Practical
// Low-Rank Gradient Compression for Distributed Optimization", 2019), computing what PyTorch's
// powerSGD_hook computes, step for step, so that a job moved between the two trains alike:
//
//   auto state = std::make_shared<dpt::PowerSGDState>(dpt::PowerSGDOptions().matrix_approximation_rank(4)
//                                                                              .start_iter(1000));
//   ddp.register_comm_hook(dpt::comm_hooks::powersgd(state));
//   ...
//   checkpoint["comm_hook"] = state->state_dict();   // an exact resume needs it (per rank: the errors)
//
// Each gradient of a bucket, seen as a matrix M (rows = its first dimension), is replaced by the
// rank-r approximation P Q^T of the mean over ranks: P = M Q is all-reduced and orthogonalized,
// Q = M^T P is all-reduced, and every rank writes P Q^T / world into the gradient. A rank sends
// (rows + cols) x r numbers instead of rows x cols. Gradients too small to gain from it (vectors,
// and matrices with (rows + cols) x r x min_compression_rate >= rows x cols) are all-reduced
// whole, together in one flat tensor.
//
// What the approximation leaves out is not lost: each rank keeps the difference between its input
// and the result (error feedback) and adds it to the next step's gradient. Q is kept from the
// previous step (warm start), so a few steps refine it as power iteration would. The first
// start_iter steps are plain mean allreduces: early training is sensitive to the approximation.
//
// Where this differs from PyTorch, on purpose: start_iter may be 0 or 1 (PyTorch refuses them
// because its DDP rebuilds buckets after the first step; dptrain's buckets never change); P and the
// uncompressed tensors are all-reduced in one collective (PyTorch reduces the latter first, then P:
// two ranks' sums are the same, more ranks' may round differently); Q's stage starts when the
// reducer launches the next bucket (PendingReduction::advance), not from a callback thread, so the
// collectives keep one order on every rank; P is not kept between steps (only Q is ever reused).

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/arg.h>

#include "dptrain/parallel/comm_hooks.h"

namespace dpt {

// PyTorch's PowerSGDState arguments, with its defaults.
struct PowerSGDOptions {
  // r: the rank of each approximation. 1 to 4 suits most image models; higher is more exact
  // and sends more.
  TORCH_ARG(int, matrix_approximation_rank) = 1;
  // Steps of plain allreduce before compression begins.
  TORCH_ARG(int64_t, start_iter) = 1000;
  // A matrix is compressed only if that divides what it sends by more than this.
  TORCH_ARG(double, min_compression_rate) = 2;
  // Keep each rank's compression error and add it to the next step's gradient.
  TORCH_ARG(bool, use_error_feedback) = true;
  // Start each step's Q from the last step's (else from new random values every step).
  TORCH_ARG(bool, warm_start) = true;
  // Added to each column's norm before dividing by it: a small value (1e-8) keeps a gradient
  // column of zeros from turning into NaN; 0 as in PyTorch.
  TORCH_ARG(double, orthogonalization_epsilon) = 0;
  // Seeds the random Q: every rank must use the same.
  TORCH_ARG(uint32_t, random_seed) = 0;
};

// Elements a step's gradients hold, and what the hook reduced for them.
struct CompressionStats {
  int64_t before = 0;
  int64_t after = 0;
  // before / after; 1 for a step of plain allreduce.
  double rate() const { return after > 0 ? static_cast<double>(before) / static_cast<double>(after) : 1.0; }
};

// What PowerSGD keeps between steps, one per DistributedDataParallel. Not thread-safe: the
// reducer calls its hook from one thread at a time.
class PowerSGDState {
 public:
  explicit PowerSGDState(PowerSGDOptions options = {});

  const PowerSGDOptions& options() const { return options_; }
  // Steps begun (the reducer's last bucket of a step ends one).
  int64_t iteration() const { return iteration_; }
  bool compressing() const { return iteration_ >= options_.start_iter(); }
  // The last complete step's.
  CompressionStats last_step_stats() const { return last_stats_; }

  // Everything an exact resume needs. The error feedback is this rank's own: a checkpoint keeps
  // every rank's (see train/), the rest is the same on every rank.
  c10::impl::GenericDict state_dict() const;
  // From state_dict() of the same model, bucket layout and rank. ConfigError for entries that
  // state_dict() does not write, and at the first compressed step for buckets of other sizes.
  void load_state_dict(const c10::impl::GenericDict& state);
  // Forgets the errors (a resume at another world size, where they belong to other ranks).
  void drop_error_feedback() { for (auto& [index, bucket] : buckets_) bucket.error = at::Tensor(); }

 private:
  friend class PowerSGDHook;

  // The seeds of the random starting Q, as numpy.random.RandomState(seed).randint(1_000_000_000)
  // draws them (PyTorch's hook uses numpy's legacy generator): MT19937 seeded alike, each number
  // masked to 30 bits and drawn again while above the bound.
  class SeedSequence {
   public:
    explicit SeedSequence(uint32_t seed) : seed_(seed), engine_(seed) {}
    uint64_t next();
    // 32-bit draws so far: with the seed, the whole state.
    int64_t draws() const { return draws_; }
    void restore(int64_t draws);

   private:
    uint32_t seed_;
    std::mt19937 engine_;
    int64_t draws_ = 0;
  };

  struct BucketMemory {
    at::Tensor error;  // this rank's input minus the result, the bucket's size (the input, mid-step)
    at::Tensor q;      // every compressed matrix's Q, end to end (the warm start)
    at::Tensor first;  // scratch: every P, then the gradients reduced whole, in one collective
  };

  void end_bucket(const GradBucket& bucket, const CompressionStats& stats);

  PowerSGDOptions options_;
  SeedSequence seeds_;
  std::map<size_t, BucketMemory> buckets_;  // by bucket index
  int64_t iteration_ = 0;
  CompressionStats step_stats_;  // the step under way, bucket by bucket
  CompressionStats last_stats_;
};

namespace comm_hooks {

// The PowerSGD hook over `state`. Hand one state to one DistributedDataParallel: the bucket
// indices key its memory.
CommHook powersgd(std::shared_ptr<PowerSGDState> state);

}  // namespace comm_hooks
}  // namespace dpt
