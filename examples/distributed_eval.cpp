// distributed_eval: evaluation on several processes as the tutorials do it — each rank predicts its
// shard, the counts are summed with all_reduce and the per-sample predictions collected with
// all_gather — but exact: the shards are not padded, so no image is counted twice, and shards of
// different sizes are gathered correctly. The result equals a single process's evaluation.
//
//   dptrain launch --standalone --nproc-per-node 2 -- build/bin/distributed_eval --val-size 333
//   build/bin/distributed_eval --checkpoint resnet20.pt --data digits/ --verify
//
// The Python original, and what goes wrong in it:
//   sampler = DistributedSampler(val_set, shuffle=False)   # pads to a multiple of the world size
//   correct = torch.tensor(n_correct); dist.all_reduce(correct)   # padded duplicates counted
//   preds = [torch.zeros_like(mine) for _ in range(world)]
//   dist.all_gather(preds, mine)                           # needs the same size on every rank

#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/synthetic.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/resnet.h"
#include "dptrain/models/state_dict.h"

namespace {

struct Flags {
  std::string data;        // an ImageFolder whose val/ is evaluated; empty: the synthetic set
  std::string checkpoint;  // a state dict (torch.save(model.state_dict()) or dptrain's)
  std::string dist_url = "env://";
  int64_t val_size = 1001;  // synthetic set only
  int64_t fit_steps = 40;   // synthetic set without a checkpoint: training steps on rank 0 first
  int64_t batch_size = 100;
  bool verify = false;  // rank 0 also evaluates everything alone and compares
  double timeout_s = 120;
};

std::vector<int64_t> all_indices(int64_t n) {
  std::vector<int64_t> indices(static_cast<size_t>(n));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return indices;
}

struct Predictions {
  at::Tensor predicted;  // the predicted class of each sample, in the order of the indices given
  at::Tensor labels;     // its true class
};

Predictions predict(dpt::models::ResNet& model, const std::shared_ptr<const dpt::data::Dataset>& set,
                    std::vector<int64_t> indices, int64_t batch_size) {
  std::vector<at::Tensor> predicted{torch::empty({0}, torch::kLong)}, labels{torch::empty({0}, torch::kLong)};
  // Fail on a bad image: skipping it would leave the evaluation short of a sample.
  dpt::data::Loader loader(set, std::move(indices), 0,
                           dpt::data::LoaderOptions().batch_size(batch_size).threads(1).bad_image_policy(
                               dpt::data::BadImagePolicy::Error));
  while (auto batch = loader.next()) {
    predicted.push_back(model->forward(batch->images).argmax(1));
    labels.push_back(batch->labels);
  }
  return {torch::cat(predicted), torch::cat(labels)};
}

// Stands in for a trained checkpoint when there is none: a few SGD steps on the synthetic set's
// training split, so that the accuracy evaluated below means something.
void fit(dpt::models::ResNet& model, int64_t steps, int64_t batch_size) {
  namespace data = dpt::data;
  auto train_set = std::make_shared<data::SyntheticDataset>(
      data::SyntheticOptions().size(steps * batch_size).image_size(40).seed(0),
      data::Transform(data::TransformOptions().mode(data::TransformMode::Train).size(32).scale_min(0.35).seed(0)));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  data::Loader loader(train_set, all_indices(train_set->size()), 0,
                      data::LoaderOptions().batch_size(batch_size).threads(1));
  model->train();
  while (auto batch = loader.next()) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(batch->images), batch->labels).backward();
    optimizer.step();
  }
}

// Every rank's (index, prediction) rows, as one prediction per dataset index. all_gather needs
// equal shapes, so each rank pads its rows to the largest shard with index -1 rows, dropped here.
at::Tensor gather_predictions(dpt::dist::Communicator& comm, const std::vector<int64_t>& indices,
                              const at::Tensor& predictions, int64_t dataset_size) {
  auto count = torch::tensor({static_cast<int64_t>(indices.size())});
  comm.all_reduce(count, dpt::dist::ReduceOp::Max);
  auto rows = torch::full({count.item<int64_t>(), 2}, -1, torch::kLong);
  const auto n = static_cast<int64_t>(indices.size());
  rows.narrow(0, 0, n).select(1, 0).copy_(torch::tensor(indices, torch::kLong));
  rows.narrow(0, 0, n).select(1, 1).copy_(predictions);

  auto all = torch::cat(comm.all_gather(rows));
  all = all.index({all.select(1, 0).ge(0)});
  DPT_ASSERT(all.size(0) == dataset_size, "gathered ", all.size(0), " predictions for ", dataset_size, " samples");
  auto by_index = torch::full({dataset_size}, -1, torch::kLong);
  by_index.index_put_({all.select(1, 0)}, all.select(1, 1));
  DPT_ASSERT(by_index.ge(0).all().item<bool>(), "a sample was predicted twice, another never");
  return by_index;
}

// A short fingerprint of the prediction vector, printed so that runs can be compared exactly.
int64_t digest(const at::Tensor& by_index) {
  auto weights = torch::arange(1, by_index.size(0) + 1, torch::kLong);
  return (by_index * weights).sum().item<int64_t>() % 1000000007;
}

int run(const Flags& flags) {
  namespace data = dpt::data;
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().init_method(flags.dist_url).timeout(
      std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000))));
  const int rank = comm->rank(), world = comm->size();

  auto transform = data::Transform(data::TransformOptions().mode(data::TransformMode::Eval).resize(32).size(32));
  std::shared_ptr<const data::Dataset> val_set;
  if (flags.data.empty()) {
    val_set = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions().size(flags.val_size).image_size(40).seed(1), transform);
  } else {
    val_set = std::make_shared<data::ImageFolder>(flags.data + "/val", transform);
  }

  torch::manual_seed(0);  // the same model in every run, whatever the world size
  auto model = dpt::models::resnet20(dpt::models::ResNetOptions().num_classes(val_set->num_classes()));
  if (flags.checkpoint.empty()) {
    // Rank 0 trains; its parameters and BatchNorm statistics are then copied to every rank.
    if (rank == 0) fit(model, flags.fit_steps, 32);
    torch::NoGradGuard no_grad;
    for (auto& item : dpt::models::state_dict(*model)) comm->broadcast(item.value());
  } else {
    dpt::models::load_state_dict(*model, dpt::models::read_state_dict(flags.checkpoint));
  }
  model->eval();
  torch::NoGradGuard no_grad;

  // Strided shards without padding: with 1001 samples on 2 ranks, 501 and 500.
  const auto indices = data::EvalSampler(val_set->size(), world, rank).indices();
  const auto mine = predict(model, val_set, indices, flags.batch_size);

  // The tutorials' metric reduction: per-rank correct and total, summed over ranks.
  auto counts = torch::stack({mine.predicted.eq(mine.labels).sum(), torch::tensor(mine.labels.size(0))});
  comm->all_reduce(counts, dpt::dist::ReduceOp::Sum);
  const int64_t correct = counts[0].item<int64_t>(), total = counts[1].item<int64_t>();
  const auto by_index = gather_predictions(*comm, indices, mine.predicted, val_set->size());

  if (rank == 0) {
    std::printf("distributed_eval: %d process(es), shard sizes %lld..%lld\n", world,
                static_cast<long long>(data::EvalSampler(val_set->size(), world, world - 1).num_samples()),
                static_cast<long long>(data::EvalSampler(val_set->size(), world, 0).num_samples()));
    std::printf("top-1 %.2f%% (%lld/%lld images), predictions digest %lld\n", 100.0 * correct / total,
                static_cast<long long>(correct), static_cast<long long>(total),
                static_cast<long long>(digest(by_index)));
    if (flags.verify) {
      const auto alone = predict(model, val_set, all_indices(val_set->size()), flags.batch_size).predicted;
      if (!alone.equal(by_index)) {
        std::fprintf(stderr, "distributed_eval: the gathered predictions differ from rank 0's own evaluation in %lld "
                     "of %lld samples\n", static_cast<long long>(alone.ne(by_index).sum().item<int64_t>()),
                     static_cast<long long>(val_set->size()));
        return 1;
      }
      std::printf("equal to a single process's evaluation of all %lld samples\n",
                  static_cast<long long>(val_set->size()));
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Exact distributed evaluation with all_reduce and all_gather; start it with dptrain launch"};
  auto checkpoint = app.add_option("--checkpoint", flags.checkpoint, "ResNet-20 state dict to evaluate");
  app.add_option("--data", flags.data, "ImageFolder whose val/ is evaluated (default: the synthetic set)")
      ->needs(checkpoint);
  app.add_option("--dist-url", flags.dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--val-size", flags.val_size, "synthetic set size")->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size, "per process")->capture_default_str();
  app.add_option("--fit-steps", flags.fit_steps, "without a checkpoint: steps of training on rank 0 first")
      ->capture_default_str();
  app.add_flag("--verify", flags.verify, "rank 0 also evaluates everything alone and compares");
  app.add_option("--timeout", flags.timeout_s, "seconds any collective may take")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "distributed_eval: error: " << e.what() << std::endl;
    return 1;
  }
}
