#pragma once
// A learnable synthetic image set, generated on the fly from (seed, index): each class is a
// shape (disc, square, triangle, ring, cross, diamond, stripes) in its own hue, drawn at a random
// position and scale over a noisy background. A small CNN reaches high accuracy on it within an
// epoch or two, which makes it the default for runs without real data (--dummy).
//
//   dpt::data::SyntheticDataset train(dpt::data::SyntheticOptions().size(5000).num_classes(10),
//                                     dpt::data::Transform(train_options));
//   dpt::data::Image picture = train.render(7);   // the untransformed image of sample 7

#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "dptrain/data/dataset.h"
#include "dptrain/data/transform.h"

namespace dpt::data {

struct SyntheticOptions {
  // Number of samples.
  TORCH_ARG(int64_t, size) = 1000;
  TORCH_ARG(int64_t, num_classes) = 10;
  // Side of the generated square image, before the transform.
  TORCH_ARG(int, image_size) = 64;
  // Images differ between seeds; use different seeds for train and validation sets.
  TORCH_ARG(uint64_t, seed) = 0;
};

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(SyntheticOptions options, Transform transform);

  int64_t size() const override { return options_.size(); }
  int64_t num_classes() const override { return options_.num_classes(); }
  std::vector<int64_t> sample_shape() const override { return transform_.sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override;
  std::string describe(int64_t index) const override;

  // Labels cycle through the classes: sample i has class i % num_classes.
  int64_t label(int64_t index) const { return index % options_.num_classes(); }
  Image render(int64_t index) const;

 private:
  SyntheticOptions options_;
  Transform transform_;
};

}  // namespace dpt::data
