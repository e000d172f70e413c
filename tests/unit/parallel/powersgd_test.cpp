// PowerSGD through DistributedDataParallel, and its state across a checkpoint. What it computes is
// held to PyTorch's hook by tests/peer/test_powersgd_oracle.py.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dptrain/parallel/ddp.h"
#include "dptrain/parallel/powersgd.h"
#include "support/grad_buckets.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

namespace {

using dpt::PowerSGDOptions;
using dpt::PowerSGDState;
using dpt::dist::Communicator;
using dpt::testing::Batches;
using dpt::testing::make_batches;
using dpt::testing::max_difference;
using dpt::testing::train_ddp;
using dpt::testing::train_reference;

dpt::CommHook powersgd(const PowerSGDOptions& options) {
  return dpt::comm_hooks::powersgd(std::make_shared<PowerSGDState>(options));
}

// At full rank (r = the smaller side of every matrix, compressed however little it saves), P Q^T
// projects the mean gradient onto its own column space: the exact mean, up to rounding, so DDP
// trains as one process on the whole batch. At rank 1 it does not (the negative control).
TEST(PowerSGD, FullRankTrainsAsTheExactMeanAndRankOneDoesNot) {
  const Batches data = make_batches(/*steps=*/20, /*batch=*/2 * 4);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    const auto full = train_ddp(comm, data, 100,
                                powersgd(PowerSGDOptions().matrix_approximation_rank(16).min_compression_rate(0.01).start_iter(0)));
    EXPECT_LE(max_difference(full, expected), 1e-4) << "rank " << comm.rank();
    const auto low = train_ddp(comm, data, 100,
                               powersgd(PowerSGDOptions().matrix_approximation_rank(1).min_compression_rate(0.01).start_iter(0)));
    EXPECT_GT(max_difference(low, expected), 1e-3) << "rank " << comm.rank();
  });
}

// Two buckets of matrices and a vector, each rank's gradients its own.
struct HandBuckets {
  std::vector<dpt::GradBucket> buckets{dpt::testing::grad_bucket(0, 2, {{12, 20}, {12}}),
                                       dpt::testing::grad_bucket(1, 2, {{24, 9}, {30, 40}})};

  // One step: every bucket filled from (rank, step), launched, then waited for; the results.
  std::vector<at::Tensor> step(Communicator& comm, const dpt::CommHook& hook, int64_t s) {
    std::vector<dpt::PendingReduction> pending;
    for (auto& bucket : buckets) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * s + 10 * comm.rank() + bucket.index);
      bucket.buffer.copy_(at::randn(bucket.buffer.sizes(), gen));
      pending.push_back(hook(comm, bucket));
    }
    std::vector<at::Tensor> out;
    for (size_t b = 0; b < buckets.size(); ++b) {
      pending[b].wait();
      out.push_back(buckets[b].buffer.clone());
    }
    return out;
  }
};

// A state saved after step 3 and loaded into a new one continues exactly as the state that went
// on: the errors, Q, the step count and the random seeds' position all travel.
TEST(PowerSGD, StateDictResumesExactly) {
  const auto options = PowerSGDOptions().matrix_approximation_rank(2).start_iter(1).warm_start(false);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    HandBuckets through, resumed;
    auto state = std::make_shared<PowerSGDState>(options);
    const auto hook = dpt::comm_hooks::powersgd(state);
    std::vector<std::vector<at::Tensor>> expected;
    for (int64_t s = 0; s < 6; ++s) expected.push_back(through.step(comm, hook, s));
    EXPECT_EQ(state->iteration(), 6);
    EXPECT_NEAR(state->last_step_stats().rate(), (240.0 + 216 + 1200 + 12) / (64 + 66 + 140 + 12), 1e-9);

    auto first = std::make_shared<PowerSGDState>(options);
    for (int64_t s = 0; s < 3; ++s) resumed.step(comm, dpt::comm_hooks::powersgd(first), s);
    const auto saved = first->state_dict();
    // The state goes on after the save (a background checkpoint writes later): the dict holds copies.
    HandBuckets scratch;
    scratch.step(comm, dpt::comm_hooks::powersgd(first), 3);
    auto second = std::make_shared<PowerSGDState>(options);
    second->load_state_dict(saved);
    const auto hook2 = dpt::comm_hooks::powersgd(second);
    for (int64_t s = 3; s < 6; ++s) {
      const auto got = resumed.step(comm, hook2, s);
      for (size_t b = 0; b < got.size(); ++b) EXPECT_TRUE(got[b].equal(expected[s][b])) << "step " << s << " bucket " << b;
    }
    // Without the errors (a resume at another world size) the steps differ: the test can fail.
    auto forgetful = std::make_shared<PowerSGDState>(options);
    HandBuckets again;
    for (int64_t s = 0; s < 3; ++s) again.step(comm, dpt::comm_hooks::powersgd(forgetful), s);
    auto without = std::make_shared<PowerSGDState>(options);
    without->load_state_dict(forgetful->state_dict());
    without->drop_error_feedback();
    const auto got = again.step(comm, dpt::comm_hooks::powersgd(without), 3);
    EXPECT_GT((got[1] - expected[3][1]).abs().max().item<double>(), 1e-3);
  });
}

TEST(PowerSGD, RefusesAStateOfAnotherBucketLayout) {
  dpt::testing::run_ranks(1, [&](Communicator& comm) {
    const auto options = PowerSGDOptions().matrix_approximation_rank(2).start_iter(0);
    auto state = std::make_shared<PowerSGDState>(options);
    HandBuckets buckets;
    buckets.step(comm, dpt::comm_hooks::powersgd(state), 0);
    auto dict = state->state_dict();
    dict.insert_or_assign("error.1", at::zeros({7}));
    auto loaded = std::make_shared<PowerSGDState>(options);
    loaded->load_state_dict(dict);
    try {
      buckets.step(comm, dpt::comm_hooks::powersgd(loaded), 1);
      FAIL() << "a saved error of the wrong size was taken";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("error of bucket 1 holds 7 values, the bucket 1416"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(PowerSGDState(PowerSGDOptions().matrix_approximation_rank(0)), dpt::ConfigError);
    // Entries state_dict() does not write: refused by name, not read as something else.
    auto unknown = state->state_dict();
    unknown.insert("p.x", at::zeros({3}));
    try {
      PowerSGDState(options).load_state_dict(unknown);
      FAIL() << "an unknown entry was taken";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("holds 'p.x', not an error or a Q tensor"), std::string::npos) << e.what();
    }
    auto untyped = state->state_dict();
    untyped.insert_or_assign("iteration", std::string("four"));
    EXPECT_THROW(PowerSGDState(options).load_state_dict(untyped), dpt::ConfigError);
  });
}

}  // namespace
