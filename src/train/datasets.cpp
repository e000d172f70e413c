#include "datasets.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/shard_set.h"
#include "dptrain/data/synthetic.h"

namespace dpt::train {

namespace fs = std::filesystem;

namespace {

std::optional<data::AutoAugmentOptions> augment_options(const DataOptions& options,
                                                        const data::TransformOptions& shared) {
  auto augment = options.auto_augment();
  if (augment) augment->interpolation(shared.interpolation());
  return augment;
}

// `shared`: what both transforms take (filter, normalisation).
data::Transform train_transform(const DataOptions& options, data::TransformOptions shared, uint64_t seed, int size,
                                double scale_min) {
  return data::Transform(shared.mode(data::TransformMode::Train)
                             .size(size)
                             .scale_min(scale_min)
                             .flip_probability(options.flip() ? 0.5 : 0.0)
                             .erase_probability(options.random_erase())
                             .auto_augment(augment_options(options, shared))
                             .seed(seed));
}

data::Transform eval_transform(data::TransformOptions shared, int size, int resize) {
  return data::Transform(shared.mode(data::TransformMode::Eval).size(size).resize(resize));
}

// The sides of the transforms: the data's default crop (the resize keeping `resize_ratio` to the
// crop), then --image-size, then the flags for each side.
struct Sizes {
  int train_crop, val_crop, val_resize;
};

Sizes sizes_for(const DataOptions& options, int default_crop, double resize_ratio) {
  const int crop = options.image_size().value_or(default_crop);
  Sizes sizes;
  sizes.train_crop = options.train_crop_size().value_or(crop);
  sizes.val_crop = options.val_crop_size().value_or(crop);
  sizes.val_resize = options.val_resize_size().value_or(static_cast<int>(sizes.val_crop * resize_ratio + 0.5));
  return sizes;
}

// A class's index is its folder's place in the sorted list of each split: a folder that only one
// split has would give the other split's later classes other indices, and validation would
// silently score against the wrong labels.
template <class Split>
void check_same_classes(const Split& train, const Split& val) {
  if (train.classes() == val.classes()) return;
  auto only_in = [](const std::vector<std::string>& these, const std::vector<std::string>& those) {
    std::vector<std::string> only;
    std::set_difference(these.begin(), these.end(), those.begin(), those.end(), std::back_inserter(only));
    return only.empty() ? std::string("none") : join(only, ", ");
  };
  throw DataError(str("train/ has ", train.num_classes(), " class folders and val/ ", val.num_classes(),
                      ", and each split numbers its classes by their sorted names: both need the same folders "
                      "(only in train/: ", only_in(train.classes(), val.classes()), "; only in val/: ",
                      only_in(val.classes(), train.classes()), ")"));
}

// The splits of a folder (ImageFolders or shard sets; `train` null where only val/ is read),
// checked to number their classes alike, with their warnings for the banner.
template <class Split>
RunDatasets split_datasets(std::shared_ptr<Split> train, std::shared_ptr<Split> val, const std::string& kind,
                           int image_size, std::vector<int64_t> train_shard_sizes, int64_t train_index_bytes) {
  if (train) check_same_classes(*train, *val);
  RunDatasets datasets{train, val, kind, image_size, /*warnings=*/{}, std::move(train_shard_sizes), train_index_bytes};
  for (const auto* split : {train.get(), val.get()}) {
    if (!split) continue;
    for (const auto& warning : split->warnings()) datasets.warnings.push_back("warning: " + warning);
  }
  return datasets;
}

}  // namespace

RunDatasets open_datasets(const DataOptions& options, uint64_t seed, const models::ModelInfo& model, Splits splits) {
  // Small images keep more of themselves in a crop than ImageNet's 8% floor allows.
  constexpr double kSmallImageScaleMin = 0.35;
  const bool with_train = splits == Splits::kTrainAndVal;
  // Builds the training split only where the run reads it.
  const auto if_trained = [with_train](auto make) { return with_train ? make() : nullptr; };
  data::TransformOptions shared;
  if (options.interpolation()) shared.interpolation(*options.interpolation());
  if (options.dummy()) {
    const Sizes sizes = sizes_for(options, 32, 1.0);
    // Drawn a quarter larger than the largest side asked, so that crops and the resize have room.
    const int largest = std::max(sizes.train_crop, sizes.val_resize);
    const auto synthetic = [&](int64_t images, uint64_t set_seed) {
      return data::SyntheticOptions()
          .size(images)
          .num_classes(options.dummy_classes())
          .image_size(largest + largest / 4)
          .seed(set_seed);
    };
    return {if_trained([&] {
              return std::make_shared<data::SyntheticDataset>(
                  synthetic(options.dummy_train_size(), seed),
                  train_transform(options, shared, seed, sizes.train_crop, kSmallImageScaleMin));
            }),
            std::make_shared<data::SyntheticDataset>(synthetic(options.dummy_val_size(), seed + 1),
                                                     eval_transform(shared, sizes.val_crop, sizes.val_resize)),
            "synthetic", sizes.train_crop, /*warnings=*/{}, /*train_shard_sizes=*/{}};
  }
  const fs::path root(options.root());
  DPT_CHECK(!options.root().empty(), ConfigError, "no data folder given: pass DATA (an ImageFolder with train/ and val/, "
            "or a CIFAR-10 binary folder), or --dummy for the synthetic set");
  // A URL (http://, https://, s3://) names a folder of shard sets, train/ and val/, on a server.
  const bool remote = data::is_remote(options.root());
  DPT_CHECK(remote || fs::is_directory(root), DataError, "data folder '", root.string(),
            "' does not exist or is not a folder");
  // A CIFAR-10 folder, told by a file of a split the run reads (evaluation: the test batch).
  if (!remote && fs::exists(root / data::cifar_files(with_train).front())) {
    const Sizes sizes = sizes_for(options, data::kCifarSide, 1.0);
    return {if_trained([&] {
              return std::make_shared<data::Cifar10>(
                  root.string(), true, train_transform(options, shared, seed, sizes.train_crop, kSmallImageScaleMin));
            }),
            std::make_shared<data::Cifar10>(root.string(), false,
                                            eval_transform(shared, sizes.val_crop, sizes.val_resize)),
            "CIFAR-10", sizes.train_crop, /*warnings=*/{}, /*train_shard_sizes=*/{}};
  }
  if (with_train) {
    for (const char* split : {"train", "val"}) {
      DPT_CHECK(remote || fs::is_directory(root / split), DataError, "data folder '", root.string(), "' has no ",
                split, "/ folder; expected train/ and val/ (ImageFolders or shard sets), or CIFAR-10 binary files");
    }
  } else {
    DPT_CHECK(remote || fs::is_directory(root / "val"), DataError, "data folder '", root.string(),
              "' has no val/ folder; evaluation reads val/ (an ImageFolder or a shard set), or CIFAR-10's test_batch.bin");
  }
  // torchvision's recipe: RandomResizedCrop(crop) for training, Resize(resize) + CenterCrop(crop)
  // for validation, with the model's sizes (224 and 256 for most; other sizes keep the ratio),
  // filter and normalisation, those its published weights were trained and evaluated with.
  if (!options.interpolation()) shared.interpolation(model.interpolation);
  if (model.half_normalization) shared.mean({0.5f, 0.5f, 0.5f}).std({0.5f, 0.5f, 0.5f});
  const Sizes sizes = sizes_for(options, static_cast<int>(model.crop_size),
                                static_cast<double>(model.resize_size) / static_cast<double>(model.crop_size));
  const double scale_min = sizes.train_crop <= 64 ? kSmallImageScaleMin : 0.08;
  const auto train = train_transform(options, shared, seed, sizes.train_crop, scale_min);
  const auto val = eval_transform(shared, sizes.val_crop, sizes.val_resize);
  const std::string train_root = (root / "train").string(), val_root = (root / "val").string();
  if (remote || data::is_shard_set(with_train ? train_root : val_root)) {
    const data::ShardCacheOptions& cache = options.shard_cache();
    auto shards =
        if_trained([&] { return std::make_shared<data::ShardSet>(train_root, train, options.bad_images(), cache); });
    auto val_shards = std::make_shared<data::ShardSet>(val_root, val, options.bad_images(), cache);
    RunDatasets datasets =
        split_datasets(shards, val_shards, "shards", sizes.train_crop,
                       shards ? shards->shard_sizes() : std::vector<int64_t>{}, shards ? shards->index_bytes() : 0);
    if (const data::ShardCache* fetched = val_shards->cache()) {
      datasets.shard_cache = fetched->options();
      if (starts_with(val_root, "s3://")) datasets.s3 = fetched->store().s3();
    }
    return datasets;
  }
  return split_datasets(
      if_trained([&] { return std::make_shared<data::ImageFolder>(train_root, train, options.bad_images()); }),
      std::make_shared<data::ImageFolder>(val_root, val, options.bad_images()), "ImageFolder", sizes.train_crop,
      /*train_shard_sizes=*/{}, /*train_index_bytes=*/0);
}

}  // namespace dpt::train
