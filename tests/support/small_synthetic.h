#pragma once
// A small synthetic training set for the loader's tests: 16x16 images of 5 classes, cropped to 8x8
// by the train transform seeded with `seed`.
//
//   auto dataset = dpt::testing::small_synthetic(/*size=*/20, /*seed=*/9);

#include <cstdint>
#include <memory>

#include "dptrain/data/synthetic.h"

namespace dpt::testing {

inline std::shared_ptr<const dpt::data::Dataset> small_synthetic(int64_t size, uint64_t seed) {
  using namespace dpt::data;
  return std::make_shared<SyntheticDataset>(SyntheticOptions().size(size).num_classes(5).image_size(16),
                                            Transform(TransformOptions().mode(TransformMode::Train).size(8).seed(seed)));
}

}  // namespace dpt::testing
