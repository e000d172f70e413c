// dptrain's side of the PowerSGD oracle test (tests/peer/test_powersgd_oracle.py): one rank of a
// 2-process job started with the torchrun variables. It hands dpt::comm_hooks::powersgd three
// buckets of gradients for several steps, each rank its own random gradients, launching every
// bucket before waiting for the first (as the reducer does), and writes what Python's
// powerSGD_hook needs to repeat the run and what came out:
//
//   dptrain_powersgd_oracle OUT_DIR RANK START_ITER SEED
//       ->  OUT_DIR/input.<rank>.pt   "b<bucket>.g<gradient>": [steps, *shape], this rank's gradients
//           OUT_DIR/ours.<rank>.pt    "b<bucket>.s<step>": the bucket's buffer after the hook
//
// The buckets hold what decides PowerSGD's course: vectors and a small matrix (reduced whole),
// one shape twice with another between (P and Q are laid out, and Q drawn, by shape), and
// matrices whose rank is bounded by RANK or by their own size.

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dptrain/compat/pickle.h"
#include "dptrain/dist/init.h"
#include "dptrain/parallel/powersgd.h"
#include "support/grad_buckets.h"

namespace {

constexpr int64_t kSteps = 6;

const std::vector<std::vector<std::vector<int64_t>>> kBuckets = {
    {{10, 32}, {10}, {16, 8, 3, 3}, {16}},
    {{16, 8, 3, 3}, {32, 16, 3, 3}, {8, 4, 1, 1}, {32, 16, 3, 3}},
    {{20, 300}, {64, 72}, {5, 3}},
};

void save(const c10::Dict<std::string, at::Tensor>& dict, const std::string& path) {
  const std::vector<char> bytes = dpt::compat::pickle_save(dict);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int run(const std::string& out, int rank_limit, int64_t start_iter, uint32_t seed) {
  at::set_num_threads(1);
  auto comm = dpt::dist::init_process_group(dpt::dist::InitOptions().backend("gloo").timeout(std::chrono::seconds(60)));
  const int rank = comm->rank();

  torch::manual_seed(100 + rank);
  std::vector<dpt::GradBucket> buckets;
  std::vector<std::vector<at::Tensor>> inputs;  // [bucket][gradient]: [steps, *shape]
  c10::Dict<std::string, at::Tensor> input_file;
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    buckets.push_back(dpt::testing::grad_bucket(b, kBuckets.size(), kBuckets[b]));
    inputs.emplace_back();
    for (size_t g = 0; g < kBuckets[b].size(); ++g) {
      std::vector<int64_t> shape = kBuckets[b][g];
      shape.insert(shape.begin(), kSteps);
      inputs[b].push_back(torch::randn(shape));
      input_file.insert("b" + std::to_string(b) + ".g" + std::to_string(g), inputs[b].back());
    }
  }
  save(input_file, out + "/input." + std::to_string(rank) + ".pt");

  auto state = std::make_shared<dpt::PowerSGDState>(
      dpt::PowerSGDOptions().matrix_approximation_rank(rank_limit).start_iter(start_iter).random_seed(seed));
  const dpt::CommHook hook = dpt::comm_hooks::powersgd(state);
  c10::Dict<std::string, at::Tensor> results;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<dpt::PendingReduction> pending;
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (size_t g = 0; g < buckets[b].gradients.size(); ++g) buckets[b].gradients[g].copy_(inputs[b][g][s]);
      pending.push_back(hook(*comm, buckets[b]));
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
      pending[b].wait();
      results.insert("b" + std::to_string(b) + ".s" + std::to_string(s), buckets[b].buffer.clone());
    }
  }
  save(results, out + "/ours." + std::to_string(rank) + ".pt");
  const dpt::CompressionStats stats = state->last_step_stats();
  std::cout << "rank " << rank << ": " << kSteps << " steps, iteration " << state->iteration() << ", compression "
            << stats.before << " -> " << stats.after << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: dptrain_powersgd_oracle OUT_DIR RANK START_ITER SEED (under RANK/WORLD_SIZE/MASTER_ADDR/"
                 "MASTER_PORT)\n";
    return 2;
  }
  return run(argv[1], std::stoi(argv[2]), std::stoll(argv[3]), static_cast<uint32_t>(std::stoul(argv[4])));
}
