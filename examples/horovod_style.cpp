// horovod_style: the Horovod PyTorch tutorial, in C++, on dpt::hvd. Each process trains a
// ResNet-20 on its shard of the data; the learning rate is scaled by the number of processes;
// rank 0's weights and optimizer state are broadcast before training; DistributedOptimizer
// reduces float16-compressed gradients during backward; metrics are averaged with hvd::allreduce.
//
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/horovod_style --epochs 3
//   mpirun -np 2 build/bin/horovod_style          # or srun -n 2; hvd::init() reads either
//
// The Python original:
//   hvd.init(); torch.manual_seed(...)
//   optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
//   hvd.broadcast_parameters(model.state_dict(), root_rank=0)
//   hvd.broadcast_optimizer_state(optimizer, root_rank=0)
//   optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
//                                        compression=hvd.Compression.fp16)
//   ... metric_average(val, name) = hvd.allreduce(torch.tensor(val), name=name)

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/data/sampler.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/state_dict.h"
#include "dptrain/parallel/hvd.h"
#include "common.h"

namespace {

namespace hvd = dpt::hvd;

int run(const examples::Flags& flags) {
  namespace data = dpt::data;
  hvd::InitGuard hvd_init(
      dpt::dist::InitOptions().timeout(std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  const auto sets = examples::make_datasets(flags);

  torch::manual_seed(hvd::rank());  // different on purpose: broadcast_parameters makes them rank 0's
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(sets.train->num_classes()));
  // Horovod's rule: the global batch grows with the number of processes, so does the step size.
  auto sgd = std::make_shared<torch::optim::SGD>(
      model->parameters(), torch::optim::SGDOptions(flags.lr * hvd::size()).momentum(0.9).weight_decay(5e-4));
  hvd::broadcast_parameters(dpt::models::state_dict(*model), /*root_rank=*/0);
  hvd::broadcast_optimizer_state(*sgd, /*root_rank=*/0);
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters(),
                                      hvd::DistributedOptimizerOptions().compression(hvd::Compression::Fp16));

  data::DistributedSampler sampler(sets.train->size(), data::SamplerOptions(hvd::size(), hvd::rank()).seed(0));
  data::EvalSampler val_sampler(sets.val->size(), hvd::size(), hvd::rank());
  if (hvd::rank() == 0) {
    std::printf("horovod_style: %d process(es), lr %g (%g x %d), batch %lld per process, %lld training images\n",
                hvd::size(), flags.lr * hvd::size(), flags.lr, hvd::size(), static_cast<long long>(flags.batch_size),
                static_cast<long long>(sets.train->size()));
  }
  const auto buffers = model->named_buffers();
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    examples::Totals train = examples::train_epoch(flags, sets.train, sampler.indices(), epoch, torch::kCPU,
                                                   [&](const at::Tensor& images, const at::Tensor& labels) {
                                                     optimizer.zero_grad();
                                                     auto loss = torch::nn::functional::cross_entropy(
                                                         model->forward(images), labels);
                                                     loss.backward();
                                                     optimizer.step();
                                                     return loss;
                                                   });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // BatchNorm statistics are per rank under Horovod; validate one model, rank 0's.
    hvd::broadcast_parameters(buffers, /*root_rank=*/0);
    model->eval();
    const auto local_val = examples::evaluate([&](const at::Tensor& x) { return model->forward(x); }, sets.val,
                                              val_sampler.indices(), torch::kCPU);
    // Sums, not the tutorial's mean of per-rank means: exact when shards differ in size.
    const auto val = examples::Totals::from_tensor(hvd::allreduce(local_val.as_tensor(), "val_totals", hvd::ReduceOp::Sum));
    train = examples::Totals::from_tensor(hvd::allreduce(train.as_tensor(), "train_totals", hvd::ReduceOp::Sum));
    if (hvd::rank() == 0) examples::print_epoch(epoch, flags.epochs, train, val, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags;
  flags.lr = 0.05;  // per process; scaled by the number of processes
  CLI::App app{"The Horovod tutorial on dpt::hvd; start it with dptrain launch, srun or mpirun"};
  examples::add_flags(app, flags, "per process");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "horovod_style: error: " << e.what() << std::endl;
    return 1;
  }
}
