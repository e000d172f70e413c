// ddp_minimal: the DistributedDataParallel tutorial, in C++. Each process trains a ResNet-20 on
// its shard of the data (a learnable synthetic image set, or an ImageFolder with train/ and val/);
// gradients are averaged during backward; the validation accuracy is computed over all ranks
// exactly (summed counts, no padded duplicates).
//
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/ddp_minimal --epochs 3
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/ddp_minimal --data digits/
//   srun -N1 -n2 build/bin/ddp_minimal                 # rank, world and master from Slurm
//   mpirun -np 2 build/bin/ddp_minimal --dist-url file:///shared/rdzv
//
// The Python original: torch.distributed.init_process_group + DistributedSampler +
// DistributedDataParallel + dist.all_reduce of the metrics.

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/ddp.h"
#include "support/image_task.h"

namespace {

// Sums (loss, correct, count) over ranks in one collective.
examples::Totals reduce(dpt::dist::Communicator& comm, const examples::Totals& local) {
  auto t = local.as_tensor();
  comm.all_reduce(t, dpt::dist::ReduceOp::Sum);
  return examples::Totals::from_tensor(t);
}

int run(const examples::Flags& flags) {
  namespace data = dpt::data;
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().init_method(flags.dist_url).timeout(
      std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  const int rank = comm->rank(), world = comm->size();
  const auto sets = examples::make_datasets(flags);

  torch::manual_seed(rank);  // different on purpose: DDP copies rank 0's weights to every rank
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(sets.train->num_classes()));
  dpt::DistributedDataParallel ddp(model, comm);
  torch::optim::SGD optimizer(ddp.parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
  data::DistributedSampler sampler(sets.train->size(), data::SamplerOptions(world, rank).seed(0));
  data::EvalSampler val_sampler(sets.val->size(), world, rank);

  if (rank == 0) {
    std::printf("ddp_minimal: %d process(es), batch %lld per process (%lld global), %lld training images\n", world,
                static_cast<long long>(flags.batch_size), static_cast<long long>(flags.batch_size * world),
                static_cast<long long>(sets.train->size()));
  }
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    data::Loader loader(sets.train, sampler.indices(), epoch,
                        data::LoaderOptions().batch_size(flags.batch_size).threads(flags.loader_threads));
    examples::Totals train;
    while (auto batch = loader.next()) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(ddp->forward(batch->images), batch->labels);
      loss.backward();
      optimizer.step();
      train.loss_sum += loss.item<double>() * batch->labels.size(0);
      train.count += static_cast<double>(batch->labels.size(0));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto val = reduce(*comm, examples::evaluate(model, sets.val, val_sampler.indices()));
    train = reduce(*comm, train);
    if (rank == 0) examples::print_epoch(epoch, flags.epochs, train, val, seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags;
  CLI::App app{"DistributedDataParallel on a synthetic image set; start it with dptrain launch"};
  examples::add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "ddp_minimal: error: " << e.what() << std::endl;
    return 1;
  }
}
