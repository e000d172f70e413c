#pragma once
// The train and validation sets DataOptions name: the synthetic set (--dummy), a CIFAR-10
// binary folder, or an ImageFolder root with train/ and val/, with their transforms.

#include <memory>
#include <string>

#include "dptrain/data/dataset.h"
#include "dptrain/train/train_options.h"

namespace dpt::train {

struct RunDatasets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> val;
  std::string kind;  // "synthetic", "CIFAR-10" or "ImageFolder"
};

// Throws DataError naming the folder when the data is missing or unreadable.
RunDatasets open_datasets(const DataOptions& options, uint64_t seed);

}  // namespace dpt::train
