// `dptrain bench-ddp`: training throughput of DistributedDataParallel on random images, one rank
// per process (start it with `dptrain launch`). Rank 0 ends with one JSON line: images per second
// over all ranks, the mean per-step forward / backward / exposed-communication times, and the
// largest peak RSS of any rank. bench/ddp runs it next to Python PyTorch's DDP.

#include <sys/resource.h>

#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "command.h"
#include "dptrain/common/error.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/registry.h"
#include "dptrain/parallel/ddp.h"

namespace dpt::cli {

namespace {

struct BenchDdpFlags {
  std::string arch = "resnet18";
  int64_t batch_size = 32;
  int64_t image_size = 64;
  int64_t steps = 20;
  int64_t warmup = 3;
  int threads = 1;
  double bucket_cap_mb = 25;
};

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

int run_bench_ddp(const BenchDdpFlags& flags) {
  DPT_CHECK(flags.steps > 0 && flags.warmup >= 0 && flags.batch_size > 0, ConfigError,
            "--steps and --batch-size must be positive and --warmup not negative");
  at::set_num_threads(flags.threads);
  auto comm = dist::init_process_group();
  torch::manual_seed(comm->rank());
  auto model = models::create(flags.arch);
  DistributedDataParallel ddp(model, comm, DDPOptions().bucket_cap_mb(flags.bucket_cap_mb));
  torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
  const at::Tensor images = torch::randn({flags.batch_size, 3, flags.image_size, flags.image_size});
  const at::Tensor labels = torch::randint(1000, {flags.batch_size}, at::kLong);

  StepTiming total;
  std::chrono::steady_clock::time_point start;
  for (int64_t step = 0; step < flags.warmup + flags.steps; ++step) {
    if (step == flags.warmup) {
      comm->barrier();
      start = std::chrono::steady_clock::now();
    }
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(images), labels).backward();
    optimizer.step();
    if (step >= flags.warmup) {
      const StepTiming timing = ddp.last_timing();
      total.forward_ms += timing.forward_ms;
      total.backward_ms += timing.backward_ms;
      total.comm_wait_ms += timing.comm_wait_ms;
    }
  }
  // The slowest rank sets the pace.
  at::Tensor stats = torch::tensor({std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                                    peak_rss_mb()},
                                   at::kDouble);
  comm->all_reduce(stats, dist::ReduceOp::Max);
  const double seconds = stats[0].item<double>();
  if (comm->rank() == 0) {
    const double steps = static_cast<double>(flags.steps);
    nlohmann::json report = {{"arch", flags.arch},
                             {"world_size", comm->size()},
                             {"batch_size_per_rank", flags.batch_size},
                             {"image_size", flags.image_size},
                             {"steps", flags.steps},
                             {"img_s", steps * flags.batch_size * comm->size() / seconds},
                             {"step_ms", 1000 * seconds / steps},
                             {"forward_ms", total.forward_ms / steps},
                             {"backward_ms", total.backward_ms / steps},
                             {"comm_wait_ms", total.comm_wait_ms / steps},
                             {"buckets", ddp.reducer().bucket_indices().size()},
                             {"peak_rss_mb", stats[1].item<double>()}};
    std::cout << report.dump() << std::endl;
  }
  return 0;
}

}  // namespace

Command add_bench_ddp_command(CLI::App& root) {
  auto flags = std::make_shared<BenchDdpFlags>();
  CLI::App* app = root.add_subcommand(
      "bench-ddp", "Measure DistributedDataParallel training throughput on random images (one rank per process)");
  app->add_option("--arch,-a", flags->arch, "model from the registry")->capture_default_str();
  app->add_option("--batch-size,-b", flags->batch_size, "images per rank and step")->capture_default_str();
  app->add_option("--image-size", flags->image_size, "height and width of the random images")->capture_default_str();
  app->add_option("--steps", flags->steps, "measured steps")->capture_default_str();
  app->add_option("--warmup", flags->warmup, "steps run before measuring")->capture_default_str();
  app->add_option("--threads", flags->threads, "intra-op threads per rank")->capture_default_str();
  app->add_option("--bucket-cap-mb", flags->bucket_cap_mb, "gradient bucket size in MiB")->capture_default_str();
  return {app, [flags](const std::vector<std::string>&) { return run_bench_ddp(*flags); }};
}

}  // namespace dpt::cli
