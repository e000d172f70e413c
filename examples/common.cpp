#include "common.h"

#include <chrono>
#include <cstdio>

#include "dptrain/data/image_folder.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/synthetic.h"
#include "dptrain/models/resnet.h"
#include "dptrain/parallel/ddp.h"

namespace examples {

namespace data = dpt::data;

void add_flags(CLI::App& app, Flags& flags, const std::string& batch_meaning) {
  app.add_option("--data", flags.data, "ImageFolder with train/ and val/ (default: the synthetic set)");
  app.add_option("--dist-url", flags.dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--epochs", flags.epochs)->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size, batch_meaning)->capture_default_str();
  app.add_option("--lr", flags.lr)->capture_default_str();
  app.add_option("--train-size", flags.train_size)->capture_default_str();
  app.add_option("--val-size", flags.val_size)->capture_default_str();
  app.add_option("-j,--workers", flags.loader_threads, "loader threads per process")->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "seconds any collective may take")->capture_default_str();
}

DataSets make_datasets(const Flags& flags) {
  auto train_transform = data::Transform(
      data::TransformOptions().mode(data::TransformMode::Train).size(32).scale_min(0.35).seed(0));
  auto eval_transform = data::Transform(data::TransformOptions().mode(data::TransformMode::Eval).resize(32).size(32));
  if (flags.data.empty()) {
    return {std::make_shared<data::SyntheticDataset>(
                data::SyntheticOptions().size(flags.train_size).image_size(40).seed(0), train_transform),
            std::make_shared<data::SyntheticDataset>(
                data::SyntheticOptions().size(flags.val_size).image_size(40).seed(1), eval_transform)};
  }
  return {std::make_shared<data::ImageFolder>(flags.data + "/train", train_transform),
          std::make_shared<data::ImageFolder>(flags.data + "/val", eval_transform)};
}

at::Tensor Totals::as_tensor() const { return torch::tensor({loss_sum, correct, count}, torch::kDouble); }

Totals Totals::from_tensor(const at::Tensor& sums) {
  return {sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
}

Totals reduce(dpt::dist::Communicator& comm, const Totals& local) {
  at::Tensor sums = local.as_tensor();
  comm.all_reduce(sums, dpt::dist::ReduceOp::Sum);
  return Totals::from_tensor(sums);
}

Totals evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                const std::shared_ptr<const data::Dataset>& set, const std::vector<int64_t>& indices,
                torch::Device device) {
  torch::NoGradGuard no_grad;
  data::Loader loader(set, indices, 0, data::LoaderOptions().batch_size(256).threads(1));
  Totals totals;
  while (auto batch = loader.next()) {
    const at::Tensor labels = batch->labels.to(device);
    const at::Tensor logits = forward(batch->images.to(device));
    totals.loss_sum += torch::nn::functional::cross_entropy(logits, labels).item<double>() * labels.size(0);
    totals.correct += logits.argmax(1).eq(labels).sum().item<double>();
    totals.count += static_cast<double>(labels.size(0));
  }
  return totals;
}

Totals train_epoch(const Flags& flags, const std::shared_ptr<const data::Dataset>& set,
                   const std::vector<int64_t>& indices, int epoch, torch::Device device,
                   const std::function<at::Tensor(const at::Tensor& images, const at::Tensor& labels)>& step) {
  data::Loader loader(set, indices, epoch,
                      data::LoaderOptions().batch_size(flags.batch_size).threads(flags.loader_threads));
  Totals totals;
  while (auto batch = loader.next()) {
    const at::Tensor labels = batch->labels.to(device);
    const at::Tensor loss = step(batch->images.to(device), labels);
    totals.loss_sum += loss.item<double>() * labels.size(0);
    totals.count += static_cast<double>(labels.size(0));
  }
  return totals;
}

void print_epoch(int epoch, int epochs, const Totals& train, const Totals& val, double seconds) {
  std::printf("epoch %d/%d: train loss %.4f, val loss %.4f, val top-1 %.2f%% (%.0f images), %.0f img/s\n", epoch + 1,
              epochs, train.loss_sum / train.count, val.loss_sum / val.count, 100 * val.correct / val.count,
              val.count, train.count / seconds);
  std::fflush(stdout);
}

int train_ddp(const std::string& name, const Flags& flags, const std::shared_ptr<dpt::dist::Communicator>& comm,
              torch::Device device) {
  const int rank = comm->rank(), world = comm->size();
  const DataSets sets = make_datasets(flags);
  torch::manual_seed(rank);  // different on purpose: DDP copies rank 0's weights to every rank
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(sets.train->num_classes()));
  model->to(device);
  dpt::DistributedDataParallel ddp(model, comm);
  torch::optim::SGD optimizer(ddp.parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
  data::DistributedSampler sampler(sets.train->size(), data::SamplerOptions(world, rank).seed(0));
  data::EvalSampler val_sampler(sets.val->size(), world, rank);

  if (rank == 0) {
    std::printf("%s: %d process(es), batch %lld per process (%lld global), %lld training images\n", name.c_str(),
                world, static_cast<long long>(flags.batch_size), static_cast<long long>(flags.batch_size * world),
                static_cast<long long>(sets.train->size()));
  }
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    model->train();
    sampler.set_epoch(epoch);
    Totals train = train_epoch(flags, sets.train, sampler.indices(), epoch, device,
                               [&](const at::Tensor& images, const at::Tensor& labels) {
                                 optimizer.zero_grad();
                                 auto loss = torch::nn::functional::cross_entropy(ddp->forward(images), labels);
                                 loss.backward();
                                 optimizer.step();
                                 return loss;
                               });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model->eval();
    const Totals val = evaluate([&](const at::Tensor& x) { return model->forward(x); }, sets.val,
                                val_sampler.indices(), device);
    train = reduce(*comm, train);
    const Totals all_val = reduce(*comm, val);
    if (rank == 0) print_epoch(epoch, flags.epochs, train, all_val, seconds);
  }
  return 0;
}

}  // namespace examples
