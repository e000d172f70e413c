// data_parallel: the DataParallel tutorial, in C++. One process trains a ResNet-20 on K replicas:
// each step's batch is split among them, they run forward and backward in parallel (one thread
// each), their gradients are summed into the model, and one optimizer steps it.
//
//   OMP_WAIT_POLICY=PASSIVE build/bin/data_parallel --replicas 2 --epochs 3   # CPU: 2 replicas, one thread each
//   build/bin/data_parallel --gpus 4,5,6,7 --epochs 3          # CUDA build: cuda:4 is the primary
//
// The Python original: model = nn.DataParallel(model, device_ids=[4, 5, 6, 7]).

#include <chrono>
#include <iostream>

#include "common.h"
#include "dptrain/data/sampler.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/data_parallel.h"

namespace {

int run(const examples::Flags& flags, const std::vector<torch::Device>& devices) {
  namespace data = dpt::data;
  const examples::DataSets sets = examples::make_datasets(flags);
  torch::manual_seed(0);
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(sets.train->num_classes()));
  dpt::DataParallel dp(model, dpt::DataParallelOptions(devices));
  torch::optim::SGD optimizer(dp.parameters(), torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
  const torch::Device device = dp.options().output_device().value();
  data::DistributedSampler sampler(sets.train->size(), data::SamplerOptions(1, 0).seed(0));  // one process
  data::EvalSampler val_sampler(sets.val->size(), 1, 0);

  std::printf("data_parallel: %zu replica(s) on %s, batch %lld per step (about %lld per replica), "
              "%d intra-op thread(s) each, %lld training images\n",
              dp.replica_count(), devices[0].str().c_str(), static_cast<long long>(flags.batch_size),
              static_cast<long long>((flags.batch_size + dp.replica_count() - 1) / dp.replica_count()),
              dp.threads_per_replica(), static_cast<long long>(sets.train->size()));
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    // The batch stays on the host: DataParallel scatters it to the replicas' devices.
    const examples::Totals train =
        examples::train_epoch(flags, sets.train, sampler.indices(), epoch, torch::kCPU,
                              [&](const at::Tensor& images, const at::Tensor& labels) {
                                optimizer.zero_grad();
                                // The outputs of all replicas, gathered on the output device: one
                                // loss for the whole batch.
                                auto loss = torch::nn::functional::cross_entropy(dp->forward(images), labels.to(device));
                                loss.backward();
                                optimizer.step();
                                return loss;
                              });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model->eval();
    const examples::Totals val = examples::evaluate([&](const at::Tensor& x) { return dp->forward(x); }, sets.val,
                                                    val_sampler.indices(), device);
    examples::print_epoch(epoch, flags.epochs, train, val, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags;
  flags.batch_size = 128;  // ddp_minimal's global batch on 2 processes
  int replicas = 2;
  std::vector<int> gpus;
  CLI::App app{"DataParallel: one process, K model replicas, on a synthetic image set"};
  examples::add_flags(app, flags, "per step, split among the replicas");
  app.add_option("--replicas", replicas, "CPU replicas (without --gpus)")->capture_default_str();
  app.add_option("--gpus", gpus, "CUDA devices, the first one the primary (e.g. 4,5,6,7)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, gpus.empty() ? dpt::cpu_devices(replicas) : dpt::cuda_devices(gpus));
  } catch (const std::exception& e) {
    std::cerr << "data_parallel: error: " << e.what() << std::endl;
    return 1;
  }
}
