#pragma once
// What the example programs share: their flags, the data (a learnable synthetic image set, or an
// ImageFolder with train/ and val/), the validation pass, and the epoch line their tests read.
//
//   examples::Flags flags;
//   examples::add_flags(app, flags);
//   auto sets = examples::make_datasets(flags);
//   examples::Totals val = examples::evaluate(model, sets.val, val_sampler.indices());
//   examples::print_epoch(epoch, flags.epochs, train, val, seconds);   // after summing over ranks

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/data/image_folder.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/synthetic.h"

namespace examples {

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

inline void add_flags(CLI::App& app, Flags& flags) {
  app.add_option("--data", flags.data, "ImageFolder with train/ and val/ (default: the synthetic set)");
  app.add_option("--dist-url", flags.dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--epochs", flags.epochs)->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size, "per process")->capture_default_str();
  app.add_option("--lr", flags.lr)->capture_default_str();
  app.add_option("--train-size", flags.train_size)->capture_default_str();
  app.add_option("--val-size", flags.val_size)->capture_default_str();
  app.add_option("-j,--workers", flags.loader_threads, "loader threads per process")->capture_default_str();
  app.add_option("--timeout", flags.timeout_s, "seconds any collective may take")->capture_default_str();
}

struct DataSets {
  std::shared_ptr<const dpt::data::Dataset> train, val;
};

inline DataSets make_datasets(const Flags& flags) {
  namespace data = dpt::data;
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

// Sums over this rank's samples; reduce them over ranks (as one tensor) before dividing.
struct Totals {
  double loss_sum = 0, correct = 0, count = 0;

  at::Tensor as_tensor() const { return torch::tensor({loss_sum, correct, count}, torch::kDouble); }
  static Totals from_tensor(const at::Tensor& t) {
    return {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
  }
};

// The loss and top-1 sums of `model` over the validation samples `indices`.
template <typename Model>
Totals evaluate(Model& model, const std::shared_ptr<const dpt::data::Dataset>& val_set,
                const std::vector<int64_t>& indices) {
  model->eval();
  torch::NoGradGuard no_grad;
  dpt::data::Loader loader(val_set, indices, 0, dpt::data::LoaderOptions().batch_size(256).threads(1));
  Totals val;
  while (auto batch = loader.next()) {
    const at::Tensor logits = model->forward(batch->images);
    val.loss_sum += torch::nn::functional::cross_entropy(logits, batch->labels).item<double>() * batch->labels.size(0);
    val.correct += logits.argmax(1).eq(batch->labels).sum().item<double>();
    val.count += static_cast<double>(batch->labels.size(0));
  }
  return val;
}

// `train` and `val` summed over all ranks; printed by rank 0.
inline void print_epoch(int epoch, int epochs, const Totals& train, const Totals& val, double seconds) {
  std::printf("epoch %d/%d: train loss %.4f, val loss %.4f, val top-1 %.2f%% (%.0f images), %.0f img/s\n", epoch + 1,
              epochs, train.loss_sum / train.count, val.loss_sum / val.count, 100 * val.correct / val.count, val.count,
              train.count / seconds);
  std::fflush(stdout);
}

}  // namespace examples
