#pragma once
// The train and validation sets DataOptions name: the synthetic set (--dummy), a CIFAR-10
// binary folder, or an ImageFolder root with train/ and val/, with their transforms.

#include <memory>
#include <optional>
#include <string>

#include "dptrain/data/dataset.h"
#include "dptrain/data/shard_cache.h"
#include "dptrain/models/registry.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

// Which splits a run opens: evaluation reads only the validation set, and may be given a folder
// that holds nothing else (people keep ImageNet's val/ apart).
enum class Splits { kTrainAndVal, kValOnly };

struct RunDatasets {
  std::shared_ptr<const data::Dataset> train;  // null for Splits::kValOnly
  std::shared_ptr<const data::Dataset> val;
  std::string kind;  // "synthetic", "CIFAR-10", "ImageFolder" or "shards"
  int image_size = 0;  // side of the network's input
  std::vector<std::string> warnings;  // what the banner tells of the folders (empty classes, hidden folders)
  // Samples per shard of a training set kept in shards, for the shard-aware shuffle; else empty.
  std::vector<int64_t> train_shard_sizes;
  // The memory the training shards' indexes hold (0 for other kinds), for the banner.
  int64_t train_index_bytes = 0;
  // A remote shard set's cache (the folder resolved), for the banner; unset for local data.
  std::optional<data::ShardCacheOptions> shard_cache = std::nullopt;
  // Where an s3:// set's requests go and whose key signs them, for the banner; unset for others.
  std::optional<data::S3Settings> s3 = std::nullopt;
};

// DATA is a synthetic set (--dummy), CIFAR-10 files, or a folder with train/ and val/, each an
// ImageFolder or a shard set (data::ShardSet: `dptrain make-shards` output, or .tar shards).
// `model` gives ImageFolder and shard data its defaults: torchvision's input size and evaluation
// resize for that architecture (299/342 for Inception v3, 224/232 for ResNet-50); an explicit image size
// keeps the model's resize-to-crop ratio. Throws DataError naming the folder when the data is
// missing or unreadable.
RunDatasets open_datasets(const DataOptions& options, uint64_t seed, const models::ModelInfo& model,
                          Splits splits = Splits::kTrainAndVal);

}  // namespace dpt::train
