// amp_syncbn: the trio NVIDIA Apex made popular, in dptrain: mixed precision, DistributedDataParallel
// and synchronised batch norm. Each process trains a ResNet-20 on its shard of a learnable
// synthetic image set; every BatchNorm is converted to SyncBatchNorm, so batch statistics are
// those of the global batch.
//
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/amp_syncbn --epochs 3
//
// Mixed precision follows the device the process group works on: bfloat16 autocast on CPU (no
// loss scaling needed: bfloat16 has float32's range), float16 autocast with a GradScaler on CUDA
// (dynamic loss scale; a step whose gradients overflowed on any rank is skipped on all).
//
// The Python original: torch.nn.SyncBatchNorm.convert_sync_batchnorm + DistributedDataParallel +
// torch.autocast + torch.cuda.amp.GradScaler.

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/compat/compat.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/synthetic.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/convert_sync_batchnorm.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/optim/grad_scaler.h"

namespace {

struct Flags {
  int epochs = 3;
  int64_t batch_size = 32;  // per process
  double lr = 0.1;
  int64_t train_size = 4000;
  int64_t val_size = 1001;
  int64_t image_size = 32;  // the crop the network sees
  bool amp = true;
  double timeout_s = 120;
};

struct Totals {
  double loss_sum = 0, correct = 0, count = 0;
};

// Sums (loss, correct, count) over ranks in one collective.
Totals reduce(dpt::dist::Communicator& comm, const Totals& local) {
  auto t = torch::tensor({local.loss_sum, local.correct, local.count}, torch::kDouble).to(comm.device());
  comm.all_reduce(t, dpt::dist::ReduceOp::Sum);
  t = t.cpu();
  return {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
}

int run(const Flags& flags) {
  namespace data = dpt::data;
  auto comm = dpt::dist::init_process_group(
      dpt::dist::InitOptions().timeout(std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  const int rank = comm->rank(), world = comm->size();
  const auto device = comm->device();
  const bool cuda = device.is_cuda();
  const auto half = cuda ? torch::kHalf : torch::kBFloat16;

  const int64_t stored = flags.image_size * 5 / 4;  // room for the random crops
  auto train_set = std::make_shared<data::SyntheticDataset>(
      data::SyntheticOptions().size(flags.train_size).image_size(static_cast<int>(stored)).seed(0),
      data::Transform(
          data::TransformOptions().mode(data::TransformMode::Train).size(flags.image_size).scale_min(0.35).seed(0)));
  auto val_set = std::make_shared<data::SyntheticDataset>(
      data::SyntheticOptions().size(flags.val_size).image_size(static_cast<int>(stored)).seed(1),
      data::Transform(
          data::TransformOptions().mode(data::TransformMode::Eval).resize(flags.image_size).size(flags.image_size)));

  torch::manual_seed(0);
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(train_set->num_classes()));
  model->to(device);
  // Before DDP (which registers the parameters it reduces) and before the optimizer.
  const int converted = dpt::convert_sync_batchnorm(*model, comm);
  dpt::DistributedDataParallel ddp(model, comm);
  torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
  // Loss scaling only for float16; with a communicator every rank skips the same steps.
  dpt::optim::GradScaler scaler(dpt::optim::GradScalerOptions().enabled(flags.amp && cuda), comm);
  data::DistributedSampler sampler(train_set->size(), data::SamplerOptions(world, rank).seed(0));
  data::EvalSampler val_sampler(val_set->size(), world, rank);

  if (rank == 0) {
    std::printf("amp_syncbn: %d process(es), batch %lld per process (%lld global), %s, %d BatchNorm layers "
                "synchronised\n",
                world, static_cast<long long>(flags.batch_size), static_cast<long long>(flags.batch_size * world),
                !flags.amp ? "float32" : cuda ? "float16 autocast with loss scaling" : "bfloat16 autocast", converted);
  }
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    data::Loader loader(train_set, sampler.indices(), epoch, data::LoaderOptions().batch_size(flags.batch_size));
    Totals train;
    while (auto batch = loader.next()) {
      const auto images = batch->images.to(device), labels = batch->labels.to(device);
      optimizer.zero_grad();
      torch::Tensor logits;
      {
        dpt::compat::AutocastGuard autocast(device.type(), half, flags.amp);
        logits = ddp->forward(images);
      }
      // Loss and backward outside autocast, as PyTorch recommends; the loss in float32.
      auto loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
      scaler.scale(loss).backward();
      scaler.step(optimizer);
      scaler.update();
      train.loss_sum += loss.item<double>() * static_cast<double>(labels.size(0));
      train.count += static_cast<double>(labels.size(0));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // Evaluation in eval mode uses the running statistics: no collectives inside the model.
    model->eval();
    torch::NoGradGuard no_grad;
    data::Loader val_loader(val_set, val_sampler.indices(), 0, data::LoaderOptions().batch_size(256));
    Totals val;
    while (auto batch = val_loader.next()) {
      const auto labels = batch->labels.to(device);
      const auto logits = model->forward(batch->images.to(device));
      val.loss_sum += torch::nn::functional::cross_entropy(logits, labels).item<double>() *
                      static_cast<double>(labels.size(0));
      val.correct += logits.argmax(1).eq(labels).sum().item<double>();
      val.count += static_cast<double>(labels.size(0));
    }
    train = reduce(*comm, train);
    val = reduce(*comm, val);
    if (rank == 0) {
      std::printf("epoch %d/%d: train loss %.4f, val loss %.4f, val top-1 %.2f%% (%.0f images), loss scale %g, "
                  "%.0f img/s\n",
                  epoch + 1, flags.epochs, train.loss_sum / train.count, val.loss_sum / val.count,
                  100 * val.correct / val.count, val.count, scaler.get_scale(), train.count / seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Mixed precision + DistributedDataParallel + SyncBatchNorm; start it with dptrain launch"};
  app.add_option("--epochs", flags.epochs)->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size, "per process")->capture_default_str();
  app.add_option("--lr", flags.lr)->capture_default_str();
  app.add_option("--train-size", flags.train_size)->capture_default_str();
  app.add_option("--val-size", flags.val_size)->capture_default_str();
  app.add_option("--image-size", flags.image_size, "pixels per side the network sees")->capture_default_str();
  app.add_flag("!--no-amp", flags.amp, "train in float32");
  app.add_option("--timeout", flags.timeout_s, "seconds any collective may take")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "amp_syncbn: error: " << e.what() << std::endl;
    return 1;
  }
}
