#pragma once
// Batch mixing as torchvision's classification recipes do it (RandomMixup and RandomCutmix in
// references/classification/transforms.py, one of them per batch, chosen uniformly among those
// enabled, in the loader's collate function): each image is mixed with the next one in the batch
// (the batch rolled by one), and the labels become soft targets mixed in the same proportion.
//
//   dpt::train::BatchMixing mixing(dpt::train::BatchMixingOptions().mixup_alpha(0.2).cutmix_alpha(1.0), 1000);
//   dpt::data::SampleRng rng(seed, epoch, step);            // the draws depend on these only
//   at::Tensor targets = mixing.apply(images, labels, mixing.draw(rng, images.size(2), images.size(3)));
//   auto loss = torch::nn::functional::cross_entropy(model(images), targets);
//
// Mixing runs on the normalised batch, as torchvision's collate function does.

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "dptrain/data/random.h"

namespace dpt::train {

struct BatchMixingOptions {
  // Beta(alpha, alpha) of mixup's weight; 0: no mixup.
  TORCH_ARG(double, mixup_alpha) = 0.0;
  // Beta(alpha, alpha) of cutmix's area; 0: no cutmix.
  TORCH_ARG(double, cutmix_alpha) = 0.0;
};

// One batch's random draws.
struct MixDraw {
  bool cutmix = false;
  // The Beta draw: mixup's weight of the batch itself; for cutmix, what the box is sized from.
  double lambda = 1.0;
  // Cutmix: the box's center, uniform over the image.
  int64_t center_x = 0, center_y = 0;
};

class BatchMixing {
 public:
  // ConfigError for negative alphas.
  BatchMixing(BatchMixingOptions options, int64_t num_classes);

  bool enabled() const { return options_.mixup_alpha() > 0 || options_.cutmix_alpha() > 0; }

  // The draws for a batch of height x width images.
  MixDraw draw(data::SampleRng& rng, int64_t height, int64_t width) const;

  // Mixes `images` ([N, C, H, W]) in place with the batch rolled by one and returns the soft
  // targets ([N, num_classes], the images' dtype) of `labels` (class indices).
  at::Tensor apply(at::Tensor& images, const at::Tensor& labels, const MixDraw& draw) const;

 private:
  BatchMixingOptions options_;
  int64_t num_classes_;
};

// The cutmix box [x1, x2) x [y1, y2) for a draw, and the weight that remains with the batch
// itself: 1 - box area / image area.
struct CutmixBox {
  int64_t x1, y1, x2, y2;
  double lambda;
};
CutmixBox cutmix_box(const MixDraw& draw, int64_t height, int64_t width);

}  // namespace dpt::train
