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

#include "dptrain/common/error.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/synthetic.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/ddp.h"

namespace {

struct Flags {
  std::string data;  // an ImageFolder with train/ and val/; empty: the synthetic set
  std::string dist_url = "env://";  // how the ranks meet: env://, tcp://HOST:PORT, file:///PATH
  int epochs = 3;
  int64_t batch_size = 64;  // per process, as in the tutorials
  double lr = 0.1;
  int64_t train_size = 4000;
  int64_t val_size = 1001;  // odd on purpose: the distributed count must still be exact
  int loader_threads = 1;
  double timeout_s = 120;
};

struct Totals {
  double loss_sum = 0, correct = 0, count = 0;
};

// Sums (loss, correct, count) over ranks in one collective.
Totals reduce(dpt::dist::Communicator& comm, const Totals& local) {
  auto t = torch::tensor({local.loss_sum, local.correct, local.count}, torch::kDouble);
  comm.all_reduce(t, dpt::dist::ReduceOp::Sum);
  return {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
}

int run(const Flags& flags) {
  namespace data = dpt::data;
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().init_method(flags.dist_url).timeout(
      std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  const int rank = comm->rank(), world = comm->size();

  auto train_transform = data::Transform(
      data::TransformOptions().mode(data::TransformMode::Train).size(32).scale_min(0.35).seed(0));
  auto eval_transform = data::Transform(data::TransformOptions().mode(data::TransformMode::Eval).resize(32).size(32));
  std::shared_ptr<const data::Dataset> train_set, val_set;
  if (flags.data.empty()) {
    train_set = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions().size(flags.train_size).image_size(40).seed(0), train_transform);
    val_set = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions().size(flags.val_size).image_size(40).seed(1), eval_transform);
  } else {
    train_set = std::make_shared<data::ImageFolder>(flags.data + "/train", train_transform);
    val_set = std::make_shared<data::ImageFolder>(flags.data + "/val", eval_transform);
  }

  torch::manual_seed(rank);  // different on purpose: DDP copies rank 0's weights to every rank
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(train_set->num_classes()));
  dpt::DistributedDataParallel ddp(model, comm);
  torch::optim::SGD optimizer(ddp.parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
  data::DistributedSampler sampler(train_set->size(), data::SamplerOptions(world, rank).seed(0));
  data::EvalSampler val_sampler(val_set->size(), world, rank);

  if (rank == 0) {
    std::printf("ddp_minimal: %d process(es), batch %lld per process (%lld global), %lld training images\n", world,
                static_cast<long long>(flags.batch_size), static_cast<long long>(flags.batch_size * world),
                static_cast<long long>(train_set->size()));
  }
  double accuracy = 0;
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    data::Loader loader(train_set, sampler.indices(), epoch,
                        data::LoaderOptions().batch_size(flags.batch_size).threads(flags.loader_threads));
    Totals train;
    while (auto batch = loader.next()) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(ddp->forward(batch->images), batch->labels);
      loss.backward();
      optimizer.step();
      train.loss_sum += loss.item<double>() * batch->labels.size(0);
      train.count += static_cast<double>(batch->labels.size(0));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    model->eval();
    torch::NoGradGuard no_grad;
    data::Loader val_loader(val_set, val_sampler.indices(), 0, data::LoaderOptions().batch_size(256).threads(1));
    Totals val;
    while (auto batch = val_loader.next()) {
      auto logits = model->forward(batch->images);
      val.loss_sum += torch::nn::functional::cross_entropy(logits, batch->labels).item<double>() *
                      batch->labels.size(0);
      val.correct += logits.argmax(1).eq(batch->labels).sum().item<double>();
      val.count += static_cast<double>(batch->labels.size(0));
    }
    train = reduce(*comm, train);
    val = reduce(*comm, val);
    accuracy = val.correct / val.count;
    if (rank == 0) {
      std::printf("epoch %d/%d: train loss %.4f, val loss %.4f, val top-1 %.2f%% (%.0f images), %.0f img/s\n",
                  epoch + 1, flags.epochs, train.loss_sum / train.count, val.loss_sum / val.count, 100 * accuracy,
                  val.count, train.count / seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"DistributedDataParallel on a synthetic image set; start it with dptrain launch"};
  app.add_option("--data", flags.data, "ImageFolder with train/ and val/ (default: the synthetic set)");
  app.add_option("--dist-url", flags.dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--epochs", flags.epochs)->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size, "per process")->capture_default_str();
  app.add_option("--lr", flags.lr)->capture_default_str();
  app.add_option("--train-size", flags.train_size)->capture_default_str();
  app.add_option("--val-size", flags.val_size)->capture_default_str();
  app.add_option("-j,--workers", flags.loader_threads, "loader threads per process")->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "seconds any collective may take")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "ddp_minimal: error: " << e.what() << std::endl;
    return 1;
  }
}
