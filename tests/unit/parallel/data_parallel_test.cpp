#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <iostream>
#include <numeric>
#include <mutex>

#include "dptrain/common/error.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/data_parallel.h"
#include "support/tiny_training.h"

namespace {

namespace F = torch::nn::functional;
using dpt::DataParallel;
using dpt::DataParallelOptions;
using dpt::testing::max_difference;

// A small convolutional classifier without BatchNorm: 3x6x6 images, 4 classes.
torch::nn::Sequential make_model(uint64_t seed) {
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 5, 3).padding(1)), torch::nn::ReLU(),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(5, 4, 3).stride(2)), torch::nn::Tanh(),
                              torch::nn::Flatten(), torch::nn::Linear(16, 4));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.4);
  return model;
}

struct ImageBatches {
  at::Tensor x;  // [steps, batch, 3, 6, 6]
  at::Tensor y;  // [steps, batch]
};

ImageBatches make_image_batches(int64_t steps, int64_t batch) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  return {at::randn({steps, batch, 3, 6, 6}, gen), at::randint(4, {steps, batch}, gen, at::kLong)};
}

torch::optim::SGDOptions image_sgd() { return torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3); }

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

// One module on the whole batch each step.
std::vector<at::Tensor> train_reference(const ImageBatches& data) {
  auto model = make_model(3);
  torch::optim::SGD optimizer(model->parameters(), image_sgd());
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer.zero_grad();
    F::cross_entropy(model->forward(data.x[s]), data.y[s]).backward();
    optimizer.step();
  }
  return copies(model->parameters());
}

std::vector<at::Tensor> train_data_parallel(const ImageBatches& data, const std::vector<torch::Device>& devices) {
  auto model = make_model(3);
  model->to(devices.front());
  DataParallel dp(model, DataParallelOptions(devices));
  torch::optim::SGD optimizer(dp.parameters(), image_sgd());
  for (int64_t s = 0; s < data.x.size(0); ++s) {
    optimizer.zero_grad();
    F::cross_entropy(dp->forward(data.x[s].to(devices.front())), data.y[s].to(devices.front())).backward();
    optimizer.step();
  }
  std::vector<at::Tensor> on_cpu;
  for (const auto& p : model->parameters()) on_cpu.push_back(p.detach().cpu());
  return on_cpu;
}

std::vector<at::Tensor> train_data_parallel(const ImageBatches& data, int replicas) {
  return train_data_parallel(data, dpt::cpu_devices(replicas));
}

TEST(DataParallel, ScatterSizesAreTorchChunks) {
  EXPECT_EQ(dpt::scatter_sizes(10, 3), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(dpt::scatter_sizes(7, 3), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(dpt::scatter_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(dpt::scatter_sizes(2, 3), (std::vector<int64_t>{1, 1}));
  // at::chunk is torch.chunk, which PyTorch's scatter uses.
  for (int64_t n = 1; n <= 20; ++n) {
    for (int64_t k = 1; k <= 6; ++k) {
      std::vector<int64_t> expected;
      for (const auto& piece : at::chunk(at::empty({n}), k)) expected.push_back(piece.size(0));
      EXPECT_EQ(dpt::scatter_sizes(n, k), expected) << n << " rows for " << k << " replicas";
    }
  }
  EXPECT_THROW(dpt::scatter_sizes(0, 2), dpt::ConfigError);
}

TEST(DataParallel, TwoReplicasTrainLikeOneModelOnTheWholeBatch) {
  const ImageBatches data = make_image_batches(6, 8);  // 4 + 4 rows
  const double diff = max_difference(train_reference(data), train_data_parallel(data, 2));
  std::cout << "K=2, batch 8, 6 SGD steps with momentum: max |param difference| = " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
}

TEST(DataParallel, ThreeReplicasOnAnUnevenBatchTrainLikeOneModel) {
  const ImageBatches data = make_image_batches(6, 10);  // 4 + 4 + 2 rows
  const double diff = max_difference(train_reference(data), train_data_parallel(data, 3));
  std::cout << "K=3, batch 10, 6 SGD steps with momentum: max |param difference| = " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
}

TEST(DataParallel, GradientsAreThoseOfTheWholeBatchAndAccumulate) {
  const ImageBatches data = make_image_batches(2, 7);  // 3 + 3 + 1 rows
  auto reference = make_model(5);
  auto model = make_model(5);
  DataParallel dp(model, DataParallelOptions(dpt::cpu_devices(3)));
  // Two forwards before one backward (the second sees unchanged weights), then a second
  // backward without zero_grad: gradients add up as they would on one module.
  for (int pass = 0; pass < 2; ++pass) {
    (F::cross_entropy(reference->forward(data.x[0]), data.y[0]) +
     F::cross_entropy(reference->forward(data.x[1]), data.y[1]))
        .backward();
    (F::cross_entropy(dp->forward(data.x[0]), data.y[0]) + F::cross_entropy(dp->forward(data.x[1]), data.y[1]))
        .backward();
  }
  std::vector<at::Tensor> expected, actual;
  for (const auto& p : reference->parameters()) expected.push_back(p.grad());
  for (const auto& p : model->parameters()) actual.push_back(p.grad());
  const double diff = max_difference(expected, actual);
  std::cout << "K=3, batch 7, two accumulated backwards: max |grad difference| = " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
}

// As in PyTorch, BatchNorm normalizes each replica's piece on its own, and only the primary's
// running statistics (from piece 0) are kept.
TEST(DataParallel, WithBatchNormEachReplicaNormalizesItsOwnPiece) {
  torch::manual_seed(0);
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(4));
  auto first = std::dynamic_pointer_cast<dpt::models::ResNetImpl>(model->clone());
  auto second = std::dynamic_pointer_cast<dpt::models::ResNetImpl>(model->clone());
  DataParallel dp(model, DataParallelOptions(dpt::cpu_devices(2)));
  const at::Tensor x = torch::randn({6, 3, 8, 8});
  const at::Tensor y = torch::randint(4, {6}, at::kLong);
  F::cross_entropy(torch::cat({first->forward(x.narrow(0, 0, 3)), second->forward(x.narrow(0, 3, 3))}), y).backward();
  F::cross_entropy(dp->forward(x), y).backward();
  std::vector<at::Tensor> expected, actual;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    expected.push_back(first->parameters()[i].grad() + second->parameters()[i].grad());
    actual.push_back(model->parameters()[i].grad());
  }
  const double diff = max_difference(expected, actual);
  std::cout << "ResNet-20 with BatchNorm, K=2, batch 6: max |grad difference| = " << diff << std::endl;
  EXPECT_LE(diff, 1e-5);
  EXPECT_EQ(max_difference(first->buffers(), model->buffers()), 0.0);
}

TEST(DataParallel, EvaluationUsesThePrimarysBuffersAndMode) {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 2));
  DataParallel dp(model, DataParallelOptions(dpt::cpu_devices(2)));
  const at::Tensor x = torch::randn({6, 3});
  dp->forward(x);  // training mode: BatchNorm statistics of replica 0's rows reach the primary
  model->eval();
  {
    torch::NoGradGuard no_grad;
    model[1]->as<torch::nn::BatchNorm1d>()->running_var.fill_(4.0);  // the replicas must see this
  }
  const at::Tensor output = dp->forward(x);
  EXPECT_TRUE(torch::allclose(output, model->forward(x), 1e-6, 1e-6));
}

// Records the intra-op thread count each forward runs with; clones share the record.
struct ThreadProbeImpl : torch::nn::Cloneable<ThreadProbeImpl> {
  ThreadProbeImpl() { reset(); }
  void reset() override { linear = register_module("linear", torch::nn::Linear(2, 2)); }
  at::Tensor forward(const at::Tensor& x) {
    std::lock_guard<std::mutex> lock(record->mutex);
    record->counts.push_back(at::get_num_threads());
    return linear->forward(x);
  }
  struct Record {
    std::mutex mutex;
    std::vector<int> counts;
  };
  std::shared_ptr<Record> record = std::make_shared<Record>();
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(ThreadProbe);

TEST(DataParallel, EachReplicaThreadKeepsItsOwnIntraOpThreadCount) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  ThreadProbe probe;
  DataParallel dp(probe, DataParallelOptions(dpt::cpu_devices(2)).threads_per_replica(1));
  EXPECT_EQ(dp.threads_per_replica(), 1);
  dp->forward(torch::randn({4, 2}));
  EXPECT_EQ(at::get_num_threads(), 2);  // the caller's count is untouched
  std::thread later([] { EXPECT_EQ(at::get_num_threads(), 2); });  // and so is a new thread's
  later.join();
  dp->forward(torch::randn({4, 2}));
  EXPECT_EQ(probe->record->counts, (std::vector<int>{1, 1, 1, 1}));
  // Unset: the caller's count shared out, at least one each.
  EXPECT_EQ(DataParallel(ThreadProbe(), DataParallelOptions(dpt::cpu_devices(2))).threads_per_replica(), 1);
  EXPECT_EQ(DataParallel(ThreadProbe(), DataParallelOptions(dpt::cpu_devices(3))).threads_per_replica(), 1);
  at::set_num_threads(4);
  EXPECT_EQ(DataParallel(ThreadProbe(), DataParallelOptions(dpt::cpu_devices(2))).threads_per_replica(), 2);
  at::set_num_threads(before);
}

TEST(DataParallel, ReplicaErrorsReachTheCallerIntact) {
  torch::nn::Sequential model(torch::nn::Linear(3, 2));
  DataParallel dp(model, DataParallelOptions(dpt::cpu_devices(2)));
  try {
    dp->forward(torch::randn({4, 5}));
    FAIL() << "a shape error was expected";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be multiplied"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, ASecondBackwardThroughTheSameOutputIsRefused) {
  torch::nn::Sequential model(torch::nn::Linear(3, 2));
  DataParallel dp(model, DataParallelOptions(dpt::cpu_devices(2)));
  auto loss = dp->forward(torch::randn({4, 3})).sum();
  loss.backward({}, /*retain_graph=*/true);
  try {
    loss.backward();
    FAIL() << "a ConfigError was expected";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("DataParallel: backward reached the same output a second time"),
              std::string::npos)
        << e.what();
  }
}

struct PlainImpl : torch::nn::Module {
  PlainImpl() { linear = register_module("linear", torch::nn::Linear(2, 2)); }
  at::Tensor forward(const at::Tensor& x) { return linear->forward(x); }
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(Plain);

// Replicas on every visible GPU (nn.DataParallel's default) train as one CPU module on the whole
// batch: scatter, replicas, gather and the gradients' sum on CUDA. TF32 off, so that the GPU's
// convolutions and products round as fp32 ones do.
TEST(DataParallel, OverTheVisibleGpusMatchesOneModule_CUDA) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  std::vector<int> gpus(torch::cuda::device_count());
  std::iota(gpus.begin(), gpus.end(), 0);
  const auto data = make_image_batches(4, 12);
  const auto expected = train_reference(data);
  const double tolerance = 1e-4;
  EXPECT_LE(max_difference(train_data_parallel(data, dpt::cuda_devices(gpus)), expected), tolerance);
  // One step fewer lands far outside it.
  const ImageBatches fewer{data.x.narrow(0, 0, 3), data.y.narrow(0, 0, 3)};
  EXPECT_GT(max_difference(train_reference(fewer), expected), 100 * tolerance);
}

TEST(DataParallel, ConfigurationErrorsSayWhatToDo) {
  try {
    DataParallel dp(Plain(), DataParallelOptions(dpt::cpu_devices(2)));
    FAIL() << "a ConfigError was expected";
  } catch (const dpt::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("DataParallel needs a Cloneable module"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dpt::cpu_devices(0), dpt::ConfigError);
  EXPECT_THROW(DataParallel(torch::nn::Sequential(torch::nn::Linear(2, 2)), DataParallelOptions({})),
               dpt::ConfigError);
#if !defined(DPTRAIN_WITH_CUDA)
  try {
    dpt::cuda_devices({1, 3});
    FAIL() << "a ConfigError was expected";
  } catch (const dpt::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "DataParallel: GPUs 1,3 requested but this build of dptrain is CPU-only; build it against a CUDA "
              "LibTorch, or use CPU replicas");
  }
#endif
}

}  // namespace
