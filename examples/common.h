#pragma once
// What the examples share: their flags, the data (a learnable synthetic image set, or an
// ImageFolder with train/ and val/), exact validation sums, the epoch line they print, and the
// DistributedDataParallel training of ddp_minimal, which spawn runs in its workers as well.
//
//   examples::Flags flags;
//   examples::add_flags(app, flags);
//   auto comm = dpt::dist::init_process_group();
//   return examples::train_ddp("ddp_minimal", flags, comm, torch::kCPU);

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "dptrain/data/dataset.h"
#include "dptrain/dist/communicator.h"

namespace examples {

struct Flags {
  std::string data;  // an ImageFolder with train/ and val/; empty: the synthetic set
  std::string dist_url = "env://";  // how the ranks meet: env://, tcp://HOST:PORT, file:///PATH
  int epochs = 3;
  int64_t batch_size = 64;  // per process under DDP, per step (split among replicas) under DataParallel
  double lr = 0.1;
  int64_t train_size = 4000;
  int64_t val_size = 1001;  // odd on purpose: the distributed count must still be exact
  int loader_threads = 1;
  double timeout_s = 120;
};

// --data, --dist-url, --epochs, -b/--batch-size (described by `batch_meaning`), --lr, --train-size,
// --val-size, -j/--workers, --timeout.
void add_flags(CLI::App& app, Flags& flags, const std::string& batch_meaning);

struct DataSets {
  std::shared_ptr<const dpt::data::Dataset> train, val;
};
DataSets make_datasets(const Flags& flags);

// Loss and correct-prediction sums; `count` samples.
struct Totals {
  double loss_sum = 0, correct = 0, count = 0;

  // As one tensor, to be summed over ranks by any collective (a Communicator's, hvd's).
  at::Tensor as_tensor() const;
  static Totals from_tensor(const at::Tensor& sums);
};
// The sums over all ranks, in one collective.
Totals reduce(dpt::dist::Communicator& comm, const Totals& local);
// Loss and correct counts of `forward` (no gradient) on the samples `indices` of `set`.
Totals evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward,
                const std::shared_ptr<const dpt::data::Dataset>& set, const std::vector<int64_t>& indices,
                torch::Device device);

// One training pass over the samples `indices` of `set` in `epoch`'s order and augmentation:
// `step(images, labels)` (both on `device`) takes one optimizer step the way the example teaches
// and returns the batch's mean loss. Returns this rank's sums (count, loss; no correct counts).
Totals train_epoch(const Flags& flags, const std::shared_ptr<const dpt::data::Dataset>& set,
                   const std::vector<int64_t>& indices, int epoch, torch::Device device,
                   const std::function<at::Tensor(const at::Tensor& images, const at::Tensor& labels)>& step);

// "epoch 1/3: train loss 1.1500, val loss 0.9000, val top-1 68.00% (1001 images), 900 img/s"
void print_epoch(int epoch, int epochs, const Totals& train, const Totals& val, double seconds);

// ddp_minimal's training: a ResNet-20 per rank on its shard, gradients averaged by
// DistributedDataParallel, validation counted exactly over all ranks; rank 0 prints. Returns 0.
int train_ddp(const std::string& name, const Flags& flags, const std::shared_ptr<dpt::dist::Communicator>& comm,
              torch::Device device);

}  // namespace examples
