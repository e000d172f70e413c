// dptrain's side of the DDP oracle test (tests/peer/test_ddp_oracle.py): one rank of a 2-process
// job started with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. It trains a small conv net with
// DistributedDataParallel and writes, from rank 0, what Python's DDP needs to repeat the run:
//
//   dptrain_ddp_oracle OUT_DIR [--mismatch | --torchscript MODEL.pt | --zero]
//                                ->  OUT_DIR/initial.pt  the weights (and buffers) after DDP's broadcast
//                                    OUT_DIR/data.pt     {"x": [steps, batch, 3, 8, 8], "y": [steps, batch]}
//                                    OUT_DIR/final.pt    the weights and buffers after training
//                                    OUT_DIR/optimizer.pt  --zero: the optimizer's state dict
// The .pt files are dpt::compat::pickle_save output, which Python's torch.load reads (also with
// weights_only=True). With --mismatch, rank 1 builds a different last layer: every rank must fail
// with the named difference (exit 2). With --torchscript, the model is MODEL.pt, saved from Python
// with torch.jit.script (8x8 inputs, 5 classes), trained as `dptrain train -a torchscript:...`
// trains it (dpt::models::Classifier). With --zero, the optimizer is AdamW under
// ZeroRedundancyOptimizer, and rank 0 writes its state gathered from both shards.

#include <fstream>
#include <iostream>

#include <torch/torch.h>

#include "dptrain/common/error.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/registry.h"
#include "dptrain/parallel.h"
#include "dptrain/train/checkpoint/sharded_optimizer_state.h"

namespace {

constexpr int64_t kSteps = 20;
constexpr int64_t kBatchPerRank = 4;

void save(const torch::nn::Module& module, const std::string& path) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters()) state.insert(p.key(), p.value().detach().clone());
  for (const auto& b : module.named_buffers()) state.insert(b.key(), b.value().detach().clone());
  const std::vector<char> bytes = dpt::compat::pickle_save(state);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void save_bytes(const std::vector<char>& bytes, const std::string& path) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename Model>
int train(const std::string& out, Model model, const std::shared_ptr<dpt::dist::Communicator>& comm, bool zero) {
  const int rank = comm->rank();
  dpt::DistributedDataParallel ddp(
      model, comm, dpt::DDPOptions().reducer(
          dpt::ReducerOptions().first_bucket_cap_mb(0.00001).bucket_cap_mb(0.001).last_bucket_cap_mb(0.00001)));
  if (rank == 0) save(*model, out + "/initial.pt");

  torch::manual_seed(1234);
  const int64_t batch = kBatchPerRank * comm->size();
  const at::Tensor x = torch::randn({kSteps, batch, 3, 8, 8});
  const at::Tensor y = torch::randint(5, {kSteps, batch}, at::kLong);
  if (rank == 0) {
    c10::Dict<std::string, at::Tensor> data;
    data.insert("x", x);
    data.insert("y", y);
    save_bytes(dpt::compat::pickle_save(data), out + "/data.pt");
  }

  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<dpt::ZeroRedundancyOptimizer> sharded;
  if (zero) {
    sharded = std::make_shared<dpt::ZeroRedundancyOptimizer>(
        comm, std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(ddp.parameters())},
        [](std::vector<torch::optim::OptimizerParamGroup> shard) {
          return std::make_shared<torch::optim::AdamW>(std::move(shard),
                                                       torch::optim::AdamWOptions(0.01).weight_decay(0.05));
        });
    optimizer = sharded;
  } else {
    optimizer = std::make_shared<torch::optim::SGD>(ddp.parameters(),
                                                    torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  }
  for (int64_t s = 0; s < kSteps; ++s) {
    optimizer->zero_grad();
    const auto xs = x[s].narrow(0, rank * kBatchPerRank, kBatchPerRank);
    const auto ys = y[s].narrow(0, rank * kBatchPerRank, kBatchPerRank);
    torch::nn::functional::cross_entropy(ddp->forward(xs), ys).backward();
    optimizer->step();
  }
  if (rank == 0) save(*model, out + "/final.pt");
  if (sharded) {
    const auto state = dpt::train::consolidated_optimizer_state_dict(*sharded, /*to=*/0);
    if (rank == 0) save_bytes(dpt::compat::pickle_save(state), out + "/optimizer.pt");
  }
  std::cout << "rank " << rank << ": trained " << kSteps << " steps in " << ddp.reducer().bucket_indices().size()
            << " buckets" << std::endl;
  return 0;
}

int train(const std::string& out, bool mismatch, const std::string& torchscript, bool zero) {
  at::set_num_threads(1);
  auto comm = dpt::dist::init_process_group(
      dpt::dist::InitOptions().backend("gloo").timeout(std::chrono::seconds(60)));
  const int rank = comm->rank();

  // Every rank starts from different weights: DDP must copy rank 0's.
  torch::manual_seed(1 + rank);
  if (!torchscript.empty()) {
    return train(out, dpt::models::create("torchscript:" + torchscript,
                                          dpt::models::ClassifierOptions().num_classes(5).image_size(8)),
                 comm, zero);
  }
  return train(out,
               torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)), torch::nn::ReLU(),
                                     torch::nn::Flatten(),
                                     torch::nn::Linear(4 * 6 * 6, mismatch && rank == 1 ? 6 : 5)),
               comm, zero);
}

}  // namespace

int main(int argc, char** argv) {
  const bool mismatch = argc == 3 && std::string(argv[2]) == "--mismatch";
  const bool scripted = argc == 4 && std::string(argv[2]) == "--torchscript";
  const bool zero = argc == 3 && std::string(argv[2]) == "--zero";
  if (argc != 2 && !mismatch && !scripted && !zero) {
    std::cerr << "usage: dptrain_ddp_oracle OUT_DIR [--mismatch | --torchscript MODEL.pt | --zero] (under RANK/"
                 "WORLD_SIZE/MASTER_ADDR/MASTER_PORT)\n";
    return 2;
  }
  try {
    return train(argv[1], mismatch, scripted ? argv[3] : "", zero);
  } catch (const dpt::ConfigError& e) {
    std::cerr << "dptrain_ddp_oracle: error: " << e.what() << std::endl;
    return 2;
  }
}
