#include <gtest/gtest.h>

#include <torch/torch.h>

#include "dptrain/parallel/ddp.h"
#include "support/thread_ranks.h"
#include "support/tiny_training.h"

namespace {

namespace F = torch::nn::functional;
using dpt::DDPOptions;
using dpt::ReducerOptions;
using dpt::DistributedDataParallel;
using dpt::dist::Communicator;
using dpt::testing::Batches;
using dpt::testing::borrow;
using dpt::testing::fill;
using dpt::testing::make_batches;
using dpt::testing::make_mlp;
using dpt::testing::max_difference;
using dpt::testing::sgd;
using dpt::testing::train_ddp;
using dpt::testing::train_reference;

TEST(DistributedDataParallel, TinyBucketsAreLaidOutAsPyTorchLaysThemOut) {
  dpt::testing::run_ranks(1, [&](Communicator& comm) {
    DistributedDataParallel ddp(
        make_mlp(), borrow(comm),
        DDPOptions().reducer(ReducerOptions().first_bucket_cap_mb(0.0001).bucket_cap_mb(0.0001).last_bucket_cap_mb(0.0001)));
    // 104-byte limits everywhere (no smaller buckets at the end): three buckets, the last layer's
    // first, the ones train_ddp trains with.
    EXPECT_EQ(ddp.reducer().bucket_indices(), (std::vector<std::vector<size_t>>{{5, 4}, {3, 2}, {1, 0}}));
  });
}

TEST(DistributedDataParallel, TwoRanksMatchOneProcessWithTwiceTheBatch) {
  const Batches data = make_batches(/*steps=*/20, /*batch=*/2 * 4);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    const auto trained = train_ddp(comm, data, 100);
    EXPECT_LE(max_difference(trained, expected), 1e-5) << "rank " << comm.rank();
  });
}

// The tolerances are about 5x the differences seen after 20 steps (1.9e-4 for float16, 9.8e-4
// for bfloat16); the lower bound shows the compressed path was taken.
TEST(DistributedDataParallel, Fp16CompressionStaysNearTheExactResult) {
  const Batches data = make_batches(20, 8);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    const auto trained = train_ddp(comm, data, 100, dpt::comm_hooks::fp16_compress());
    const double difference = max_difference(trained, expected);
    EXPECT_LE(difference, 1e-3) << "rank " << comm.rank();
    EXPECT_GT(difference, 1e-6) << "rank " << comm.rank();
  });
}

TEST(DistributedDataParallel, Bf16CompressionStaysNearTheExactResult) {
  const Batches data = make_batches(20, 8);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    const auto trained = train_ddp(comm, data, 100, dpt::comm_hooks::bf16_compress());
    const double difference = max_difference(trained, expected);
    EXPECT_LE(difference, 5e-3) << "rank " << comm.rank();
    EXPECT_GT(difference, 1e-6) << "rank " << comm.rank();
  });
}

// k micro-batches per rank, the first k-1 under no_sync, equal one step on the k-times batch.
TEST(DistributedDataParallel, NoSyncAccumulatesThenReducesTheSum) {
  constexpr int64_t k = 3, micro = 2, steps = 2;
  const Batches data = make_batches(steps, k * 2 * micro);
  const auto expected = train_reference(data, 100);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_mlp();
    fill(*model, 100 + comm.rank());
    DistributedDataParallel ddp(model, borrow(comm), DDPOptions().reducer(ReducerOptions().first_bucket_cap_mb(0.0002).bucket_cap_mb(0.0005).last_bucket_cap_mb(0.0002)));
    torch::optim::SGD optimizer(ddp.parameters(), sgd());
    for (int64_t s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      for (int64_t j = 0; j < k; ++j) {
        const int64_t first = (j * 2 + comm.rank()) * micro;
        auto step = [&] {
          auto loss = F::cross_entropy(ddp->forward(data.x[s].narrow(0, first, micro)),
                                       data.y[s].narrow(0, first, micro));
          (loss / k).backward();
        };
        if (j < k - 1) {
          auto guard = ddp.no_sync();
          step();
        } else {
          step();
        }
      }
      optimizer.step();
    }
    EXPECT_LE(max_difference(model->parameters(), expected), 1e-5) << "rank " << comm.rank();
  });
}

// A forward, then no_sync(), then its backward (the trainer's order for the micro-batches it
// accumulates): that backward stays local, each rank's gradient its own batch's, bitwise a plain
// model's, and unequal between the ranks; reducing it anyway would lose the micro-batch under
// ZeRO-2, whose reduction keeps no local sum.
TEST(DistributedDataParallel, NoSyncEnteredAfterTheForwardKeepsItsBackwardLocal) {
  const Batches data = make_batches(1, 8);
  std::vector<at::Tensor> first_grads(2);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_mlp();
    fill(*model, 100);
    auto alone = make_mlp();
    fill(*alone, 100);
    DistributedDataParallel ddp(model, borrow(comm));
    auto x = data.x[0].narrow(0, comm.rank() * 4, 4);
    auto y = data.y[0].narrow(0, comm.rank() * 4, 4);
    auto loss = F::cross_entropy(ddp->forward(x), y);
    {
      auto guard = ddp.no_sync();
      loss.backward();
    }
    F::cross_entropy(alone->forward(x), y).backward();
    auto grads = [](torch::nn::Module& m) {
      std::vector<at::Tensor> out;
      for (const auto& p : m.parameters()) out.push_back(p.grad());
      return out;
    };
    EXPECT_EQ(max_difference(grads(*model), grads(*alone)), 0.0) << "rank " << comm.rank();
    first_grads[comm.rank()] = model->parameters().front().grad().clone();
  });
  EXPECT_FALSE(first_grads[0].equal(first_grads[1])) << "the gradients were averaged";
}

// A trunk and two heads; each step uses one head, so the other gets no gradient.
struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl()
      : trunk(register_module("trunk", torch::nn::Linear(6, 8))),
        left(register_module("left", torch::nn::Linear(8, 3))),
        right(register_module("right", torch::nn::Linear(8, 3))) {}
  at::Tensor forward(const at::Tensor& x, bool use_right) {
    auto h = torch::relu(trunk(x));
    return use_right ? right(h) : left(h);
  }
  torch::nn::Linear trunk, left, right;
};
TORCH_MODULE(TwoHeads);

// Momentum and weight decay make the difference between an unset gradient (the optimizer skips
// the parameter) and a zero one (it still moves): the right head is unused, with an unset
// gradient, in the first two steps, then used, then unused with a zero gradient.
TEST(DistributedDataParallel, FindUnusedParametersTrainsLikeOneProcess) {
  constexpr int64_t steps = 6;
  const Batches data = make_batches(steps, 8);
  auto uses_right = [](int64_t step) { return step % 3 == 2; };
  TwoHeads reference;
  fill(*reference, 5);
  {
    torch::optim::SGD optimizer(reference->parameters(), sgd());
    for (int64_t s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      F::cross_entropy(reference->forward(data.x[s], uses_right(s)), data.y[s]).backward();
      optimizer.step();
    }
  }
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    TwoHeads model;
    fill(*model, 5);
    DistributedDataParallel ddp(model, borrow(comm), DDPOptions().reducer(ReducerOptions().find_unused_parameters(true)));
    torch::optim::SGD optimizer(ddp.parameters(), sgd());
    for (int64_t s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      auto x = data.x[s].narrow(0, comm.rank() * 4, 4);
      auto y = data.y[s].narrow(0, comm.rank() * 4, 4);
      F::cross_entropy(ddp->forward(x, uses_right(s)), y).backward();
      if (s == 0) {
        EXPECT_FALSE(model->right->weight.grad().defined()) << "rank " << comm.rank();
      }
      optimizer.step();
    }
    EXPECT_LE(max_difference(model->parameters(), reference->parameters()), 1e-5) << "rank " << comm.rank();
  });
}

TEST(DistributedDataParallel, UnusedParameterWithoutFindUnusedNamesIt) {
  const Batches data = make_batches(1, 8);
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    TwoHeads model;
    DistributedDataParallel ddp(model, borrow(comm));
    auto x = data.x[0].narrow(0, comm.rank() * 4, 4);
    auto y = data.y[0].narrow(0, comm.rank() * 4, 4);
    std::string message;
    try {
      F::cross_entropy(ddp->forward(x, false), y).backward();
    } catch (const std::exception& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(dpt::str("rank ", comm.rank(), ": parameter(s) right.weight, right.bias received no "
                                    "gradient in this backward pass")),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("find_unused_parameters"), std::string::npos) << message;
  });
}

TEST(DistributedDataParallel, DifferentModelsFailOnEveryRankWithTheFirstDifference) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_mlp(comm.rank() == 0 ? 8 : 9);
    try {
      DistributedDataParallel ddp(model, borrow(comm));
      ADD_FAILURE() << "rank " << comm.rank() << " accepted different models";
    } catch (const dpt::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                dpt::str("rank ", comm.rank(), ": DistributedDataParallel: the model differs between rank 0 and "
                         "rank 1 (6 vs 6 parameters and buffers). First difference, entry 2: rank 0 has parameter "
                         "'2.weight' of shape [8, 16] and dtype Float, rank 1 has parameter '2.weight' of shape "
                         "[9, 16] and dtype Float. Build the same model on every rank"));
    }
  });
}

// A small convolutional net in channels_last, as --channels-last makes every model.
torch::nn::Sequential make_channels_last_cnn(uint64_t seed) {
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)), torch::nn::ReLU(),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 2, 1)));
  fill(*model, seed);
  for (auto& p : model->parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  return model;
}

// Each gradient lives in its bucket laid out as its parameter (PyTorch's gradient layout
// contract): no copy across layouts when backward accumulates it, one flat pass in the optimizer.
// The reduced values are still the mean of the ranks' gradients, as one process computes them.
TEST(DistributedDataParallel, ChannelsLastGradientsKeepTheirParametersLayout) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor x = at::randn({4, 3, 6, 6}, gen).contiguous(at::MemoryFormat::ChannelsLast);
  auto reference = make_channels_last_cnn(100);
  reference->forward(x).square().mean().backward();
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_channels_last_cnn(100);
    DistributedDataParallel ddp(model, borrow(comm));
    ddp->forward(x.narrow(0, 2 * comm.rank(), 2)).square().mean().backward();
    const auto params = model->parameters();
    const auto expected = reference->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& grad = params[i].grad();
      EXPECT_EQ(grad.strides(), params[i].strides()) << "rank " << comm.rank() << ", parameter " << i;
      EXPECT_TRUE(grad.is_alias_of(ddp.reducer().bucket_buffer(0))) << "rank " << comm.rank() << ", parameter " << i;
      EXPECT_LE((grad - expected[i].grad()).abs().max().item<double>(), 1e-6)
          << "rank " << comm.rank() << ", parameter " << i;
    }
    // The first weight's gradient read in the contiguous layout instead differs far beyond that.
    const at::Tensor misread = params[0].grad().contiguous().as_strided(params[0].sizes(), params[0].strides());
    EXPECT_GT((misread - expected[0].grad()).abs().max().item<double>(), 1e-3) << "rank " << comm.rank();
  });
}

// Ranks whose parameters differ only in memory format would sum unrelated elements.
TEST(DistributedDataParallel, ParametersInAnotherMemoryFormatFailWithTheirStrides) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_channels_last_cnn(100);
    if (comm.rank() == 1) {
      for (auto& p : model->parameters()) p.set_data(p.contiguous());
    }
    try {
      DistributedDataParallel ddp(model, borrow(comm));
      ADD_FAILURE() << "rank " << comm.rank() << " accepted parameters in another memory format";
    } catch (const dpt::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("First difference, entry 0: rank 0 has parameter '0.weight' of shape [4, 3, "
                                           "3, 3], strides [27, 1, 9, 3] and dtype Float, rank 1 has parameter "
                                           "'0.weight' of shape [4, 3, 3, 3] and dtype Float."),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(DistributedDataParallel, GradientsLiveInTheBucketsAndTimingIsReported) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_mlp();
    DistributedDataParallel ddp(model, borrow(comm));
    const Batches data = make_batches(1, 4);
    F::cross_entropy(ddp->forward(data.x[0]), data.y[0]).backward();
    // One bucket (the model is far below 1 MiB): every gradient is a slice of one buffer.
    ASSERT_EQ(ddp.reducer().bucket_indices().size(), 1u);
    const auto params = model->parameters();
    for (size_t i = 1; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].grad().is_alias_of(params[0].grad())) << "parameter " << i;
    }
    const auto timing = ddp.last_timing();
    EXPECT_GE(timing.forward_ms, 0);
    EXPECT_GE(timing.backward_ms, timing.comm_wait_ms);
  });
}

// Three buckets (104-byte limits): each launches once its gradients are ready, in launch order,
// before backward's end; the launch times say so in the order the buckets were laid out.
TEST(DistributedDataParallel, TimingTellsWhenEachBucketWasLaunched) {
  dpt::testing::run_ranks(2, [&](Communicator& comm) {
    auto model = make_mlp();
    DistributedDataParallel ddp(
        model, borrow(comm),
        DDPOptions().reducer(ReducerOptions().first_bucket_cap_mb(0.0001).bucket_cap_mb(0.0001).last_bucket_cap_mb(0.0001)));
    const Batches data = make_batches(2, 4);
    for (int64_t step = 0; step < 2; ++step) {
      F::cross_entropy(ddp->forward(data.x[step]), data.y[step]).backward();
      const auto timing = ddp.last_timing();
      ASSERT_EQ(timing.bucket_launch_ms.size(), 3u) << "rank " << comm.rank();
      EXPECT_GE(timing.bucket_launch_ms.front(), 0);
      for (size_t i = 1; i < 3; ++i) EXPECT_GE(timing.bucket_launch_ms[i], timing.bucket_launch_ms[i - 1]);
      // The waiting starts only once the last bucket is on its way.
      EXPECT_LE(timing.bucket_launch_ms.back(), timing.backward_ms - timing.comm_wait_ms + 1e-6);
    }
  });
}

}  // namespace
