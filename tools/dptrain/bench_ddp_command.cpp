// `dptrain bench-ddp`: training throughput of DistributedDataParallel on random images, one rank
// per process (start it with `dptrain launch`). Rank 0 ends with one JSON line: images per second
// over all ranks, the mean and the median step time, the mean per-step forward / backward /
// exposed-communication times, each gradient bucket's size and mean launch time (ms after
// forward), the bytes the comm hook reduced per step (--comm-hook: fewer when it compresses), and
// the largest peak RSS of any rank. bench/ddp runs it next to Python PyTorch's DDP.
//
// With --overlap it then measures how much of the gradient allreduce stays exposed: the same
// number of steps under no_sync() (no gradient communication), and the time to all-reduce flat
// buffers of the buckets' sizes with nothing else running. bench/ddp_net runs that across a
// shaped link.

#include <chrono>
#include <functional>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_common.h"
#include "bench_step_flags.h"
#include "comm_hook_flags.h"
#include "command.h"
#include "number_bounds.h"
#include "dptrain/dist/init.h"
#include "dptrain/models/registry.h"
#include "dptrain/parallel/comm_hook_options.h"
#include "dptrain/parallel/ddp.h"

namespace dpt::cli {

namespace {

struct BenchDdpFlags {
  BenchStepFlags step;
  // PowerSGD from the first step: the warm-up steps take its first, costlier one.
  CommHookOptions comm_hook = CommHookOptions().powersgd(PowerSGDOptions().start_iter(0));
  double bucket_cap_mb = 25;
  double last_bucket_cap_mb = 1;
  bool overlap = false;
  int64_t allreduce_repeats = 3;
};

std::vector<double> to_vector(const at::Tensor& values) {
  const at::Tensor flat = values.contiguous();
  return {flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()};
}

// Seconds this rank took for `count` calls of `body`, started together on every rank.
double timed(dist::Communicator& comm, int64_t count, const std::function<void()>& body) {
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) body();
  return seconds_since(start);
}

// The number of elements of each gradient bucket, in launch order.
std::vector<int64_t> bucket_numels(const DistributedDataParallelBase& ddp) {
  const std::vector<at::Tensor> params = ddp.parameters();
  std::vector<int64_t> numels;
  for (const auto& bucket : ddp.reducer().bucket_indices()) {
    int64_t numel = 0;
    for (size_t index : bucket) numel += params.at(index).numel();
    numels.push_back(numel);
  }
  return numels;
}

// All buckets reduced as the reducer does (launched together, then awaited), no compute beside.
void all_reduce_buckets(dist::Communicator& comm, const std::vector<at::Tensor>& buffers) {
  std::vector<dist::Work> pending;
  for (const auto& buffer : buffers) pending.push_back(comm.all_reduce_async(buffer, dist::ReduceOp::Mean));
  for (auto& work : pending) work.wait();
}

int run_bench_ddp(const BenchDdpFlags& flags) {
  at::set_num_threads(flags.step.threads);
  auto comm = dist::init_process_group();
  torch::manual_seed(comm->rank());
  auto model = models::create(flags.step.arch);
  DistributedDataParallel ddp(
      model, comm,
      DDPOptions().reducer(ReducerOptions().bucket_cap_mb(flags.bucket_cap_mb).last_bucket_cap_mb(flags.last_bucket_cap_mb)));
  if (flags.comm_hook.kind() != CommHookKind::Allreduce) ddp.register_comm_hook(make_comm_hook(flags.comm_hook));
  torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
  const at::Tensor images = torch::randn({flags.step.batch_size, 3, flags.step.image_size, flags.step.image_size});
  const at::Tensor labels = torch::randint(1000, {flags.step.batch_size}, at::kLong);

  StepTiming total;
  int64_t reduced_bytes = 0;  // over the measured steps
  const std::vector<int64_t> numels = bucket_numels(ddp);
  total.bucket_launch_ms.assign(numels.size(), 0);
  const auto train_step = [&] {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(ddp->forward(images), labels).backward();
    optimizer.step();
  };
  timed(*comm, flags.step.warmup, train_step);
  // Each synchronized step's seconds; then (--overlap) each step under no_sync(), interleaved with
  // them so that both see the same machine load; then the bucket allreduce and the peak RSS.
  at::Tensor stats = torch::zeros({2 * flags.step.steps + 2}, at::kDouble);
  for (int64_t step = 0; step < flags.step.steps; ++step) {
    stats[step] = timed(*comm, 1, train_step);
    const StepTiming timing = ddp.last_timing();
    total.forward_ms += timing.forward_ms;
    total.backward_ms += timing.backward_ms;
    total.comm_wait_ms += timing.comm_wait_ms;
    for (const auto& bucket : ddp.reducer().last_reduction().buckets) reduced_bytes += bucket.reduced_bytes;
    for (size_t i = 0; i < numels.size(); ++i) total.bucket_launch_ms[i] += timing.bucket_launch_ms.at(i);
    if (flags.overlap) {
      stats[flags.step.steps + step] = timed(*comm, 1, [&] {
        auto guard = ddp.no_sync();
        train_step();
      });
    }
  }
  std::vector<at::Tensor> buffers;
  if (flags.overlap) {
    for (int64_t numel : numels) buffers.push_back(torch::ones({numel}));
    all_reduce_buckets(*comm, buffers);  // warm the connections up
    stats[-2] = timed(*comm, flags.allreduce_repeats, [&] { all_reduce_buckets(*comm, buffers); }) /
                static_cast<double>(flags.allreduce_repeats);
  }
  stats[-1] = peak_rss_mb();
  // The slowest rank sets the pace.
  comm->all_reduce(stats, dist::ReduceOp::Max);
  if (comm->rank() == 0) {
    const double steps = static_cast<double>(flags.step.steps);
    const at::Tensor step_ms = 1000 * stats.narrow(0, 0, 2 * flags.step.steps).view({2, flags.step.steps});
    const double seconds = stats.narrow(0, 0, flags.step.steps).sum().item<double>();
    std::vector<double> bucket_mb, bucket_launch_ms;
    for (size_t i = 0; i < numels.size(); ++i) {
      bucket_mb.push_back(static_cast<double>(numels[i] * 4) / (1 << 20));
      bucket_launch_ms.push_back(total.bucket_launch_ms[i] / steps);
    }
    nlohmann::json report = {{"arch", flags.step.arch},
                             {"world_size", comm->size()},
                             {"transport", comm->transport()},
                             {"batch_size_per_rank", flags.step.batch_size},
                             {"image_size", flags.step.image_size},
                             {"steps", flags.step.steps},
                             {"img_s", steps * flags.step.batch_size * comm->size() / seconds},
                             {"step_ms", 1000 * seconds / steps},
                             {"median_step_ms", step_ms[0].median().item<double>()},
                             {"forward_ms", total.forward_ms / steps},
                             {"backward_ms", total.backward_ms / steps},
                             {"comm_wait_ms", total.comm_wait_ms / steps},
                             {"comm_hook", to_string(flags.comm_hook.kind())},
                             {"reduced_mb_per_step", static_cast<double>(reduced_bytes) / steps / (1 << 20)},
                             {"buckets", numels.size()},
                             {"bucket_mb", bucket_mb},
                             {"bucket_launch_ms", bucket_launch_ms},
                             {"peak_rss_mb", stats[-1].item<double>()}};
    if (flags.overlap) {
      report["no_sync_step_ms"] = step_ms[1].mean().item<double>();
      report["each_step_ms"] = to_vector(step_ms[0]);
      report["each_no_sync_step_ms"] = to_vector(step_ms[1]);
      report["allreduce_ms"] = 1000 * stats[-2].item<double>();
      report["allreduce_mb"] = std::accumulate(bucket_mb.begin(), bucket_mb.end(), 0.0);
    }
    std::cout << report.dump() << std::endl;
  }
  return 0;
}

}  // namespace

Command add_bench_ddp_command(CLI::App& root) {
  auto flags = std::make_shared<BenchDdpFlags>();
  CLI::App* app = root.add_subcommand(
      "bench-ddp", "Measure DistributedDataParallel training throughput on random images (one rank per process)");
  add_bench_step_flags(*app, flags->step, "rank");
  app->add_option("--bucket-cap-mb", flags->bucket_cap_mb, "gradient bucket size in MiB")
      ->check(above(0))
      ->capture_default_str();
  app->add_option("--last-bucket-cap-mb", flags->last_bucket_cap_mb,
                  "size of the last bucket (the first layers' gradients) in MiB; as large as --bucket-cap-mb "
                  "gives PyTorch's layout")
      ->check(above(0))
      ->capture_default_str();
  add_comm_hook_flags(*app, flags->comm_hook);
  app->add_flag("--overlap", flags->overlap,
                "also time the steps under no_sync() and all-reducing the buckets alone (exposed communication)");
  app->add_option("--allreduce-repeats", flags->allreduce_repeats, "timed bucket allreduces with --overlap")
      ->check(at_least(1))
      ->capture_default_str();
  return {app, [flags, app](const std::vector<std::string>&) {
            check_comm_hook_flags(*app, flags->comm_hook);
            return run_bench_ddp(*flags);
          }};
}

}  // namespace dpt::cli
