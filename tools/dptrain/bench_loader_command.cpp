// `dptrain bench-loader`: images per second of the training input pipeline on an ImageFolder or a
// shard set, in its shard-aware order (read + decode + RandomResizedCrop + flip [+ auto-augment] +
// normalize [+ random erasing] + batch), with a given number of loader threads. bench/loader runs
// it next to torchvision's DataLoader. Ends with one JSON line, which also times the cold start:
// opening the set (a remote one's indexes), its first batch, and the untimed first pass.

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "command.h"
#include "number_bounds.h"
#include "run_flags.h"
#include "dptrain/common/error.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/loader.h"
#include "dptrain/data/sampler.h"
#include "dptrain/data/shard_set.h"

namespace dpt::cli {

namespace {

struct BenchLoaderFlags {
  std::string data;
  int threads = 1;
  int64_t batch_size = 32;
  int size = 224;
  int epochs = 2;
  bool dct_scaling = true;
  std::optional<data::AutoAugmentPolicy> auto_augment;
  double random_erase = 0.0;
  data::ShardCacheOptions cache;  // remote shard sets
};

int run_bench_loader(const BenchLoaderFlags& f) {
  auto transform_options = data::TransformOptions()
                               .mode(data::TransformMode::Train)
                               .size(f.size)
                               .dct_scaling(f.dct_scaling)
                               .erase_probability(f.random_erase);
  if (f.auto_augment) transform_options.auto_augment(data::AutoAugmentOptions().policy(*f.auto_augment));
  auto transform = data::Transform(transform_options);
  std::shared_ptr<data::Dataset> dataset;
  data::SamplerOptions sampler_options(1, 0);
  const auto opening = std::chrono::steady_clock::now();
  if (data::is_shard_set(f.data)) {
    auto shards = std::make_shared<data::ShardSet>(f.data, transform, data::BadImagePolicy::Error, f.cache);
    sampler_options.shard_sizes(shards->shard_sizes());
    dataset = shards;
  } else {
    dataset = std::make_shared<data::ImageFolder>(f.data, transform);
  }
  DPT_CHECK(dataset->size() > 0, DataError, "no images under ", f.data);
  data::DistributedSampler sampler(dataset->size(), sampler_options);
  // One buffer pool for all epochs, as a training loop would keep one.
  auto options = data::LoaderOptions()
                     .batch_size(f.batch_size)
                     .threads(f.threads)
                     .buffer_pool(std::make_shared<data::BufferPool>());
  const double open_s = seconds_since(opening);
  // Epoch 0, apart from the timed passes, warms the page cache and the allocator (and a remote
  // set's cache): its first batch and its rate are those of a cold start.
  double first_batch_s = 0;
  int64_t first_pass_images = 0;
  {
    data::Loader warmup(dataset, sampler.indices(), 0, options);
    while (auto batch = warmup.next()) {
      if (first_pass_images == 0) first_batch_s = seconds_since(opening);
      first_pass_images += batch->images.size(0);
    }
  }
  const double first_pass_s = seconds_since(opening) - open_s;
  // The timed passes run as one stream of draws (pass k's shuffle, each sample augmented as its
  // k-th copy), as the middle of a long epoch runs: an epoch's end, where threads without a batch
  // left wait for the slowest, comes once in an ImageNet epoch of 40,000 batches, but after every
  // fourth batch of each thread in passes of 1,000 images over 8 threads.
  std::vector<int64_t> draws;
  for (int pass = 0; pass < f.epochs; ++pass) {
    sampler.set_epoch(1 + pass);
    for (int64_t index : sampler.indices()) draws.push_back(data::draw_number({index, pass}, dataset->size()));
  }
  int64_t images = 0, batches = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto usage_start = ProcessUsage::now();
  data::Loader loader(dataset, std::move(draws), 1, options);
  for (; auto batch = loader.next(); ++batches) images += batch->images.size(0);
  const double seconds = seconds_since(start);
  const ProcessUsage used = ProcessUsage::now() - usage_start;
  const auto skips = loader.skipped();
  const auto skipped = static_cast<int64_t>(skips.size());
  if (skipped != 0) {
    std::cerr << "bench-loader: skipped " << skips.front().what << " (and " << skipped - 1 << " more)\n";
  }
  // With other work on the machine, images per CPU second measure the pipeline's cost where
  // images per wall second measure its share of the cores; busy_fraction, the CPU time over the
  // threads' wall time, says how much of the time the threads computed rather than waited.
  const double cpu = used.cpu_seconds();
  nlohmann::json report = {
      {"threads", f.threads},      {"images", images},           {"skipped", skipped}, {"seconds", seconds},
      {"img_s", images / seconds}, {"batch_size", f.batch_size}, {"batches", batches}, {"size", f.size},
      {"dct_scaling", f.dct_scaling},
      {"epochs", f.epochs},        {"cpu_seconds", cpu},         {"img_per_cpu_s", images / cpu},
      {"busy_fraction", cpu / (f.threads * seconds)},            {"user_seconds", used.user_seconds},
      {"system_seconds", used.system_seconds},                   {"minor_faults", used.minor_faults},
      {"voluntary_switches", used.voluntary_switches},           {"involuntary_switches", used.involuntary_switches},
      {"auto_augment", f.auto_augment ? to_string(*f.auto_augment) : "none"}, {"random_erase", f.random_erase},
      {"open_s", open_s},          {"first_batch_s", first_batch_s}, {"first_pass_s", first_pass_s},
      {"first_pass_img_s", first_pass_images / first_pass_s}};
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace

Command add_bench_loader_command(CLI::App& root) {
  auto flags = std::make_shared<BenchLoaderFlags>();
  CLI::App* app =
      root.add_subcommand("bench-loader", "Measure the training input pipeline on an ImageFolder or a shard set");
  app->add_option("data", flags->data, "ImageFolder root (ROOT/<class>/<image>) or shard set (manifest, folder, "
                 "brace pattern or .tar)")->required();
  app->add_option("--threads", flags->threads, "loader threads")->check(at_least(1))->capture_default_str();
  app->add_option("--batch-size", flags->batch_size, "images per batch")->check(at_least(1))->capture_default_str();
  app->add_option("--size", flags->size, "RandomResizedCrop output size")->check(at_least(1))->capture_default_str();
  app->add_option("--epochs", flags->epochs, "timed passes over the data, as one stream (after one untimed pass)")
      ->check(at_least(1))
      ->capture_default_str();
  add_parsed_option(*app, "--auto-augment", flags->auto_augment, data::parse_auto_augment_policy,
                    "augmentation policy after the flip (as dptrain train's flag)");
  app->add_option("--random-erase", flags->random_erase, "probability of RandomErasing per image")
      ->check(within(0, 1));
  app->add_option("--dct-scaling", flags->dct_scaling, "decode JPEGs at reduced DCT scale when the crop allows")
      ->capture_default_str();
  add_shard_cache_flags(*app, flags->cache);
  return {app, [flags](const std::vector<std::string>&) { return run_bench_loader(*flags); }};
}

}  // namespace dpt::cli
