#include "run_flags.h"

#include <chrono>
#include <iostream>

#include "dptrain/train/logs/observers.h"

namespace dpt::cli {

void add_run_flags(CLI::App& app, RunFlags& f) {
  // As with argparse, a flag given twice takes its last value (handy after a shell alias).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("data", f.data, "ImageFolder root with train/ and val/, or a CIFAR-10 binary folder");
  app.add_option("-a,--arch", f.arch, "model: resnet18/34/50/101/152, or resnet20/56 for small images");
  app.add_option("-j,--workers", f.workers, "loader threads per process")->capture_default_str();
  app.add_option("-b,--batch-size", f.batch_size, "samples per step on each process")->capture_default_str();
  app.add_option("-p,--print-freq", f.print_freq, "print every N steps")->capture_default_str();
  app.add_option("--seed", f.seed, "seeds weights, shuffles and augmentation")->capture_default_str();
  app.add_option("--gpu", f.gpu, "CUDA device index for this process");
  app.add_flag("--dummy", f.dummy, "train on the learnable synthetic set instead of DATA");
  app.add_option("--dummy-train-size", f.dummy_train_size)->capture_default_str();
  app.add_option("--dummy-val-size", f.dummy_val_size)->capture_default_str();
  app.add_option("--image-size", f.image_size, "input side (default 224 for ImageFolder, 32 otherwise)");
  app.add_flag("--no-flip", f.no_flip, "no random horizontal flips (for digits, text, ...)");
  app.add_flag("--amp", f.amp, "mixed precision: bf16 autocast on CPU, fp16 with loss scaling on CUDA");
  app.add_flag("--channels-last", f.channels_last, "NHWC memory format for weights and inputs");
  app.add_flag("--deterministic", f.deterministic, "bitwise-repeatable CPU runs (one compute thread)");
  app.add_option("--bad-images", f.bad_images, "skip unreadable images, or fail on the first")
      ->check(CLI::IsMember({"skip", "fail"}))
      ->capture_default_str();
  app.add_option("--world-size", f.world_size, "processes in the job (default: from the launcher)");
  app.add_option("--rank", f.rank, "this process's rank (default: from the launcher)");
  app.add_option("--dist-url", f.dist_url, "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--dist-backend", f.dist_backend, "gloo, nccl or auto")->capture_default_str();
  app.add_option("--dist-timeout", f.dist_timeout_s, "seconds any collective may take")->capture_default_str();
  app.add_option("--rendezvous-timeout", f.rendezvous_timeout_s,
                 "seconds to wait for every rank to join (default: DPTRAIN_RENDEZVOUS_TIMEOUT, else 300 or "
                 "--dist-timeout if shorter)");
  app.add_flag("--verbose-rendezvous", f.verbose_rendezvous, "every rank reports who is missing, not only rank 0");
}

std::optional<std::chrono::milliseconds> milliseconds(const std::optional<double>& seconds) {
  if (!seconds) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(*seconds * 1000));
}

train::TrainOptions run_options(const RunFlags& f, const std::string& arch) {
  dist::WorldOverrides world;
  world.rank = f.rank;
  world.world_size = f.world_size;
  auto options = train::TrainOptions(arch)
                     .data(f.data)
                     .dummy(f.dummy)
                     .dummy_train_size(f.dummy_train_size)
                     .dummy_val_size(f.dummy_val_size)
                     .image_size(f.image_size)
                     .flip(!f.no_flip)
                     .batch_size(f.batch_size)
                     .workers(f.workers)
                     .amp(f.amp)
                     .channels_last(f.channels_last)
                     .deterministic(f.deterministic)
                     .seed(f.seed)
                     .gpu(f.gpu)
                     .bad_images(f.bad_images == "fail" ? data::BadImagePolicy::Error : data::BadImagePolicy::Skip)
                     .dist(dist::InitOptions()
                               .backend(f.dist_backend)
                               .init_method(f.dist_url)
                               .world(world)
                               .timeout(*milliseconds(f.dist_timeout_s))
                               .rendezvous_timeout(milliseconds(f.rendezvous_timeout_s))
                               .verbose_rendezvous(f.verbose_rendezvous))
                     .log(&std::cout)
                     .logs(train::LogOptions().print_freq(train::checked_print_freq(f.print_freq)));
  return options;
}

nlohmann::json metrics_json(const train::MetricSums& m) {
  return {{"loss", m.loss()},       {"acc1", m.top1_percent()}, {"acc5", m.top5_percent()},
          {"loss_sum", m.loss_sum}, {"correct1", m.correct1},   {"correct5", m.correct5},
          {"count", m.count}};
}

}  // namespace dpt::cli
