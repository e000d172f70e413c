#include "run_flags.h"

#include <iostream>

#include "number_bounds.h"

namespace dpt::cli {

train::TrainOptions command_line_options() {
  auto options = train::TrainOptions("resnet18").log(&std::cout).logs(train::LogOptions());
  // imagenet/main.py's processes wait as long as torch.distributed's default (30 minutes).
  options.parallel().dist().timeout(std::chrono::minutes(30));
  // Unless --bucket-cap-mb gives one, DDP chooses its bucket size by measuring (BucketTuner).
  options.parallel().tune_buckets(true);
  return options;
}

void add_shard_cache_flags(CLI::App& app, data::ShardCacheOptions& cache) {
  app.add_option("--data-cache", cache.folder(),
                 "remote shard sets: the folder their shards are fetched to, shared by a machine's processes "
                 "(default: ~/.cache/dptrain/shards)");
  app.add_option_function<double>(
         "--data-cache-size", [&cache](double gib) { cache.max_bytes(static_cast<int64_t>(gib * (int64_t{1} << 30))); },
         "remote shard sets: the most GiB of shards the cache folder holds")
      ->check(within(1e-6, 1 << 20))
      ->default_str(std::to_string(cache.max_bytes() >> 30));
  // A faraway store (long round trips, or a server slow to find a file) fills the link only with
  // more requests under way.
  app.add_option("--fetch-streams", cache.fetch_streams(),
                 "remote shard sets: shards fetched at once, each over a connection of its own")
      ->check(within(1, 64))
      ->capture_default_str();
}

void add_run_flags(CLI::App& app, train::TrainOptions& o) {
  // As with argparse, a flag given twice takes its last value (handy after a shell alias).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train::DataOptions& data = o.data();
  dist::InitOptions& dist = o.parallel().dist();
  app.add_option("data", data.root(),
                 "a folder with train/ and val/ (ImageFolders, or shard sets from make-shards), or CIFAR-10 files");
  app.add_option("-a,--arch", o.arch(), "model: a name `dptrain models` lists, or torchscript:PATH")
      ->capture_default_str();
  app.add_flag_callback("--no-aux-logits", [&o] { o.aux_logits(false); },
                        "googlenet, inception_v3: without the auxiliary classifiers (and their losses)");
  app.add_option("--dropout", o.dropout(), "classifier dropout (default: the model's own; 0 turns every dropout off)")
      ->check(within(0, 1));
  app.add_option("-j,--workers", data.workers(), "loader threads per process")->capture_default_str();
  app.add_option("-b,--batch-size", o.batch_size(), "samples per step on each process")->capture_default_str();
  app.add_option("-p,--print-freq", o.logs()->print_freq(), "print every N steps")->capture_default_str();
  app.add_option("--seed", o.seed(), "seeds weights, shuffles and augmentation")->capture_default_str();
  app.add_option("--gpu", o.parallel().gpu(), "CUDA device index for this process")->check(at_least(0));
  app.add_flag("--dummy", data.dummy(), "train on the learnable synthetic set instead of DATA");
  // A hundred million samples, seven times ImageNet-21k: the sampler's order of the set takes at
  // least 8 bytes a sample on every rank, and 99999999999 ran out of memory there unrefused.
  constexpr double kMostDummySamples = 1e8;
  app.add_option("--dummy-train-size", data.dummy_train_size(), "--dummy: training images")
      ->check(within(1, kMostDummySamples))
      ->capture_default_str();
  app.add_option("--dummy-val-size", data.dummy_val_size(), "--dummy: validation images")
      ->check(within(1, kMostDummySamples))
      ->capture_default_str();
  // Five times ImageNet-21k's classes: the classifier's weights grow with them.
  app.add_option("--dummy-classes", data.dummy_classes(), "--dummy: classes (sample i is of class i % classes)")
      ->check(within(1, 1e5))
      ->capture_default_str();
  app.add_option("--image-size", data.image_size(), "input side (default 224 for ImageFolder, 32 otherwise)");
  app.add_option("--train-crop-size", data.train_crop_size(), "training crop side (default: --image-size)");
  app.add_option("--val-crop-size", data.val_crop_size(), "validation center-crop side (default: --image-size)");
  app.add_option("--val-resize-size", data.val_resize_size(),
                 "validation resize of the shorter side (default: the model's ratio to the crop)");
  add_parsed_option(app, "--interpolation", data.interpolation(), data::parse_interpolation,
                    "resize filter, bilinear or bicubic (default: the model's, see `dptrain models`)");
  app.add_option("--open-shards", data.open_shards(),
                 "shard sets: shuffle this many shards at a time (0: all samples at once, as a folder)")
      ->check(at_least(0))
      ->capture_default_str();
  add_shard_cache_flags(app, data.shard_cache());
  app.add_flag_callback("--no-flip", [&data] { data.flip(false); }, "no random horizontal flips (for digits, text, ...)");
  app.add_flag("--amp", o.amp(), "mixed precision: bf16 autocast on CPU, fp16 with loss scaling on CUDA");
  app.add_flag("--channels-last", o.channels_last(), "NHWC memory format for weights and inputs");
  app.add_flag("--deterministic", o.deterministic(), "bitwise-repeatable CPU runs (one compute thread)");
  add_parsed_option(app, "--bad-images", data.bad_images(), data::parse_bad_image_policy,
                    "skip unreadable images, or fail on the first");
  app.add_option("--max-bad-images", data.max_bad_images(),
                 "stop when more than this fraction of a pass's images were bad and skipped")
      ->check(within(0, 1))
      ->capture_default_str();
  app.add_option("--world-size", dist.world().world_size, "processes in the job (default: from the launcher)");
  app.add_option("--rank", dist.world().rank, "this process's rank (default: from the launcher)");
  app.add_option("--dist-url", dist.init_method(), "env://, tcp://HOST:PORT or file:///PATH")->capture_default_str();
  app.add_option("--dist-backend", dist.backend(), "gloo, nccl or auto")->capture_default_str();
  app.add_option_function<double>(
         "--dist-timeout", [&dist](double seconds) { dist.timeout(milliseconds(seconds, "--dist-timeout")); },
         "seconds any collective may take")
      ->default_str(std::to_string(std::chrono::duration_cast<std::chrono::seconds>(dist.timeout()).count()));
  app.add_option_function<double>(
      "--rendezvous-timeout",
      [&dist](double seconds) { dist.rendezvous_timeout(milliseconds(seconds, "--rendezvous-timeout")); },
      "seconds to wait for every rank to join (default: DPTRAIN_RENDEZVOUS_TIMEOUT, else 300 or "
      "--dist-timeout if shorter)");
  app.add_flag("--verbose-rendezvous", dist.verbose_rendezvous(), "every rank reports who is missing, not only rank 0");
  app.add_flag_callback("--no-hierarchical-allreduce", [&dist] { dist.hierarchical(false); },
                        "where the ranks span machines, all-reduce across all of them at once instead of within each "
                        "machine first (as DPTRAIN_HIERARCHICAL=0)");
}

nlohmann::json metrics_json(const train::MetricSums& m) {
  return {{"loss", m.loss()},       {"acc1", m.top1_percent()}, {"acc5", m.top5_percent()},
          {"loss_sum", m.loss_sum}, {"correct1", m.correct1},   {"correct5", m.correct5},
          {"count", m.count}};
}

}  // namespace dpt::cli
