// `dptrain bench-dp`: training throughput of single-process DataParallel on random images, K CPU
// replicas (or the listed GPUs), the same model, image size and per-replica batch as bench-ddp's
// per-rank batch. One JSON line: images per second, mean step time, peak RSS. bench/data_parallel
// runs it beside DistributedDataParallel on 2 processes.

#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_common.h"
#include "bench_step_flags.h"
#include "command.h"
#include "number_bounds.h"
#include "dptrain/models/registry.h"
#include "dptrain/parallel/data_parallel.h"

namespace dpt::cli {

namespace {

struct BenchDpFlags {
  BenchStepFlags step;
  int replicas = 2;
  std::vector<int> gpus;
};

int run_bench_dp(const BenchDpFlags& flags) {
  const auto devices = flags.gpus.empty() ? cpu_devices(flags.replicas) : cuda_devices(flags.gpus);
  const int64_t replicas = static_cast<int64_t>(devices.size());
  // The process gets what K ranks of bench-ddp get together; the replica threads a share each.
  at::set_num_threads(flags.step.threads * static_cast<int>(replicas));
  torch::manual_seed(0);
  auto model = models::create(flags.step.arch);
  DataParallel dp(model, DataParallelOptions(devices).threads_per_replica(flags.step.threads));
  torch::optim::SGD optimizer(dp.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
  const int64_t batch = flags.step.batch_size * replicas;
  const auto device = dp.options().output_device().value();
  const at::Tensor images = torch::randn({batch, 3, flags.step.image_size, flags.step.image_size});
  const at::Tensor labels = torch::randint(1000, {batch}, at::kLong).to(device);

  const auto train_step = [&] {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(dp->forward(images), labels).backward();
    optimizer.step();
  };
  for (int64_t i = 0; i < flags.step.warmup; ++i) train_step();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < flags.step.steps; ++i) train_step();
  const double seconds = seconds_since(start);
  const double steps = static_cast<double>(flags.step.steps);
  const nlohmann::json report = {{"arch", flags.step.arch},
                                 {"replicas", replicas},
                                 {"device", devices[0].str()},
                                 {"batch_size_per_replica", flags.step.batch_size},
                                 {"threads_per_replica", dp.threads_per_replica()},
                                 {"image_size", flags.step.image_size},
                                 {"steps", flags.step.steps},
                                 {"img_s", steps * static_cast<double>(batch) / seconds},
                                 {"step_ms", 1000 * seconds / steps},
                                 {"peak_rss_mb", peak_rss_mb()}};
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace

Command add_bench_dp_command(CLI::App& root) {
  auto flags = std::make_shared<BenchDpFlags>();
  CLI::App* app = root.add_subcommand(
      "bench-dp", "Measure single-process DataParallel training throughput on random images (K replicas)");
  add_bench_step_flags(*app, flags->step, "replica");
  app->add_option("--replicas", flags->replicas, "CPU replicas (without --gpus)")
      ->check(at_least(1))
      ->capture_default_str();
  app->add_option("--gpus", flags->gpus, "CUDA devices, the first the primary (e.g. 4,5,6,7)")
      ->delimiter(',')
      ->check(at_least(0));
  return {app, [flags](const std::vector<std::string>&) { return run_bench_dp(*flags); }};
}

}  // namespace dpt::cli
