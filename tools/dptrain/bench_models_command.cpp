// `dptrain bench-models ARCH...`: the training step of each architecture alone (forward, loss,
// backward at a fixed batch on random images, no data loading, no communication), the figure
// bench/models sets beside torchvision's in Python on the same threads; --amp --channels-last as
// `dptrain train` runs them (bf16 autocast on the CPU; on a GPU, --gpu, fp16 autocast with loss
// scaling; NHWC weights and inputs); --sgd ends each step with the SGD update `dptrain train`
// makes by default (momentum 0.9, weight decay 1e-4); --op-counts adds "ops", the ATen operations
// of one more step by name (bench/models and bench/gpu set them beside torchvision's). One JSON
// line per architecture: {"arch", "ms_per_step", "optimizer_ms", "img_per_s",
// "forward_multiply_adds", "model_flop_per_s", "batch", "image_size", "threads", "device", "amp",
// "channels_last", "sgd"}; on a GPU also "launch_ms", the host's time to launch a step, and
// "phase_ms", the device's time for its forward (with the loss), backward and update.

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench_common.h"
#include "command.h"
#include "device_phases.h"
#include "number_bounds.h"
#include "dptrain/compat/compat.h"
#include "dptrain/dist/cuda_device.h"
#include "dptrain/models/multiply_adds.h"
#include "dptrain/models/operation_counts.h"
#include "dptrain/models/registry.h"
#include "dptrain/optim/amp.h"
#include "dptrain/optim/grad_scaler.h"
#include "dptrain/optim/optimizer.h"

namespace dpt::cli {

namespace {

struct BenchModelsFlags {
  std::vector<std::string> archs;
  int64_t batch = 32;
  int64_t image_size = 64;
  int steps = 5;
  int warmup = 2;
  int threads = 0;  // 0: LibTorch's default
  bool amp = false;
  bool channels_last = false;
  bool sgd = false;
  bool op_counts = false;
  std::optional<int> gpu;  // CUDA device index; the CPU without it
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct StepTimes {
  double step_ms = 0;       // median of the whole steps
  double optimizer_ms = 0;  // median of their updates alone (0 without --sgd)
  // On a GPU: the median host time to launch a step (all of it where the host is the bottleneck or
  // something in the step waits for the device), and each phase's median time on the device.
  double launch_ms = 0;
  std::map<std::string, double> phase_ms;
  std::map<std::string, int64_t> ops;  // of one more step, with --op-counts
};

// Waits for the device's queued kernels, so that a step's time is its execution, not its launch.
void wait_for(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The medians of `steps` training steps after `warmup` unmeasured ones.
StepTimes time_steps(models::Classifier& model, const BenchModelsFlags& flags, const at::Device& device) {
  const auto format = flags.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto on_device = torch::TensorOptions().device(device);
  const auto images = torch::randn({flags.batch, 3, flags.image_size, flags.image_size}, on_device).contiguous(format);
  const auto labels = torch::randint(10, {flags.batch}, on_device.dtype(torch::kLong));
  model->to(device);
  for (auto& parameter : model->parameters()) {
    if (parameter.dim() == 4) parameter.set_data(parameter.data().contiguous(format));
  }
  model->train();
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  if (flags.sgd) optimizer = optim::make_optimizer(*model, optim::OptimizerOptions(), /*lr=*/0.1);
  // As `dptrain train`: fp16 on a GPU needs loss scaling, bf16 on the CPU does not.
  optim::GradScaler scaler(optim::GradScalerOptions().enabled(flags.amp && optim::amp_needs_loss_scaling(device)));
  // One step; the update's milliseconds go to `update_ms` where given, the phases' ends to `phases`.
  const auto step = [&](std::vector<double>* update_ms, DevicePhases* phases) {
    if (phases) phases->start();
    model->zero_grad(/*set_to_none=*/true);
    at::Tensor logits;
    {
      compat::AutocastGuard autocast(device.type(), optim::amp_dtype(device), flags.amp);
      logits = model(images);
    }
    const auto loss = torch::nn::functional::cross_entropy(logits.to(at::kFloat), labels);
    if (phases) phases->end("forward");
    scaler.scale(loss).backward();
    if (phases) phases->end("backward");
    if (optimizer) {
      const auto update_start = std::chrono::steady_clock::now();
      scaler.step(*optimizer);
      scaler.update();
      if (update_ms) update_ms->push_back(seconds_since(update_start) * 1000.0);
      if (phases) phases->end("update");
    }
  };
  std::vector<double> times, updates, launches;
  std::map<std::string, std::vector<double>> phase_times;
  // On a GPU the update is not timed alone: waiting for the backward before it would keep its
  // launches from overlapping the backward's kernels, as they do in training. The device's own
  // clock times the phases instead.
  const bool time_update = !device.is_cuda();
  std::optional<DevicePhases> phases;
  if (device.is_cuda()) phases.emplace(device);
  for (int i = 0; i < flags.warmup + flags.steps; ++i) {
    const bool measured = i >= flags.warmup;
    wait_for(device);
    const auto start = std::chrono::steady_clock::now();
    step(time_update && measured ? &updates : nullptr, measured && phases ? &*phases : nullptr);
    const double launch_ms = seconds_since(start) * 1000.0;
    wait_for(device);
    if (!measured) continue;
    times.push_back(seconds_since(start) * 1000.0);
    launches.push_back(launch_ms);
    if (phases) {
      for (const auto& [name, ms] : phases->read()) phase_times[name].push_back(ms);
    }
  }
  StepTimes result{median(times), median(updates), device.is_cuda() ? median(launches) : 0.0, {}, {}};
  for (const auto& [name, values] : phase_times) result.phase_ms[name] = median(values);
  if (flags.op_counts) {  // after the timed steps, which the counter's callback would slow
    models::OperationCounter counter;
    step(nullptr, nullptr);
    wait_for(device);
    result.ops = counter.counts();
  }
  return result;
}

int run_bench_models(const BenchModelsFlags& flags) {
  if (flags.threads > 0) at::set_num_threads(flags.threads);
  at::Device device(at::kCPU);
  if (flags.gpu) {
    device = dist::cuda_device(*flags.gpu, "--gpu");
    at::globalContext().setBenchmarkCuDNN(true);  // fixed shapes: as `dptrain train` on a GPU
  }
  for (const auto& arch : flags.archs) {
    torch::manual_seed(0);
    auto model = models::create(arch, models::ClassifierOptions().num_classes(10).image_size(flags.image_size));
    const double macs = models::forward_multiply_adds(model, flags.image_size);
    const StepTimes times = time_steps(model, flags, device);
    const double images_per_s = static_cast<double>(flags.batch) * 1000.0 / times.step_ms;
    auto line = nlohmann::json{{"arch", arch},
                               {"ms_per_step", times.step_ms},
                               {"optimizer_ms", times.optimizer_ms},
                               {"img_per_s", images_per_s},
                               {"forward_multiply_adds", macs},
                               {"model_flop_per_s", 6.0 * macs * images_per_s},
                               {"batch", flags.batch},
                               {"image_size", flags.image_size},
                               {"threads", at::get_num_threads()},
                               {"device", device.str()},
                               {"amp", flags.amp},
                               {"channels_last", flags.channels_last},
                               {"sgd", flags.sgd}};
    if (device.is_cuda()) {
      line["launch_ms"] = times.launch_ms;
      line["phase_ms"] = times.phase_ms;
    }
    if (flags.op_counts) line["ops"] = times.ops;
    std::cout << line.dump() << std::endl;
  }
  return 0;
}

}  // namespace

Command add_bench_models_command(CLI::App& root) {
  auto flags = std::make_shared<BenchModelsFlags>();
  CLI::App* app = root.add_subcommand("bench-models", "Time each architecture's training step (forward + backward)");
  app->add_option("archs", flags->archs, "architectures (dptrain models lists them)")->required();
  app->add_option("-b,--batch-size", flags->batch, "images per step")->check(at_least(1))->capture_default_str();
  app->add_option("--image-size", flags->image_size, "side of the random images")
      ->check(at_least(8))
      ->capture_default_str();
  app->add_option("--steps", flags->steps, "measured steps (the median is reported)")
      ->check(at_least(1))
      ->capture_default_str();
  app->add_option("--warmup", flags->warmup, "unmeasured steps first")->check(at_least(0))->capture_default_str();
  app->add_option("--threads", flags->threads, "intra-op threads (default: LibTorch's)")->check(at_least(1));
  app->add_flag("--amp", flags->amp,
                "mixed precision as dptrain train --amp: bf16 autocast for the forward (the loss in fp32); on a GPU "
                "fp16 with loss scaling");
  app->add_option("--gpu", flags->gpu, "CUDA device index: time the step there (random images made on the GPU)")
      ->check(at_least(0));
  app->add_flag("--channels-last", flags->channels_last, "NHWC weights and images");
  app->add_flag("--sgd", flags->sgd, "end each step with dptrain train's SGD update (momentum 0.9, weight decay 1e-4)");
  app->add_flag("--op-counts", flags->op_counts, "add the ATen operations of one more step, by name (\"ops\")");
  return {app, [flags](const std::vector<std::string>&) { return run_bench_models(*flags); }};
}

}  // namespace dpt::cli
