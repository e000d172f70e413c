#pragma once
// torchvision's automatic augmentation policies (transforms.autoaugment) on the uint8 crop that
// RandomResizedCrop and the flip leave, before normalization, as references/classification runs
// them: AutoAugment (imagenet, cifar10 and svhn policies), RandAugment, TrivialAugmentWide, AugMix.
//
//   dpt::data::AutoAugment augment(dpt::data::AutoAugmentOptions()
//                                      .policy(dpt::data::AutoAugmentPolicy::TrivialAugmentWide));
//   dpt::data::SampleRng rng(seed, epoch, index);
//   augment.apply(crop, rng);
//
// The ops and their magnitude tables are torchvision's, bit for bit (augment_ops.h); the draws
// come from the sample's own SampleRng, so a sample's augmentation depends on (seed, epoch, index)
// only, whichever thread or rank loads it.

#include <torch/arg.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dptrain/data/augment_ops.h"
#include "dptrain/data/image.h"
#include "dptrain/data/interpolation.h"
#include "dptrain/data/random.h"

namespace dpt::data {

enum class AutoAugmentPolicy { ImageNet, Cifar10, Svhn, RandAugment, TrivialAugmentWide, AugMix };

// The names of torchvision's --auto-augment: imagenet, cifar10, svhn, ra, ta_wide, augmix;
// ConfigError for anything else.
AutoAugmentPolicy parse_auto_augment_policy(const std::string& name);
const char* to_string(AutoAugmentPolicy policy);

struct AutoAugmentOptions {
  TORCH_ARG(AutoAugmentPolicy, policy) = AutoAugmentPolicy::ImageNet;
  // RandAugment: ops per image, and the magnitude bin they all use (--ra-magnitude).
  TORCH_ARG(int, num_ops) = 2;
  TORCH_ARG(int, magnitude) = 9;
  // RandAugment and TrivialAugmentWide: bins of each op's magnitude range.
  TORCH_ARG(int, num_magnitude_bins) = 31;
  // AugMix: the bins drawn from (--augmix-severity), chains mixed, ops per chain (-1: 1 to 3 at
  // random), the Dirichlet concentration of the mixing weights, and whether the enhancement ops
  // (brightness, colour, contrast, sharpness) take part.
  TORCH_ARG(int, severity) = 3;
  TORCH_ARG(int, mixture_width) = 3;
  TORCH_ARG(int, chain_depth) = -1;
  TORCH_ARG(double, alpha) = 1.0;
  TORCH_ARG(bool, all_ops) = true;
  // The sampling filter of the geometric ops (the training recipe passes its resize filter).
  TORCH_ARG(Interpolation, interpolation) = Interpolation::Bilinear;
};

// One op of a policy's augmentation space: its magnitude bins (none for ops without a
// magnitude) and whether a coin flip negates the magnitude.
struct AugmentRange {
  AugmentOp op = AugmentOp::Identity;
  std::vector<double> magnitudes;
  bool signed_magnitude = false;
};

class AutoAugment {
 public:
  explicit AutoAugment(AutoAugmentOptions options);

  const AutoAugmentOptions& options() const { return options_; }

  // torchvision's _augmentation_space for a width x height image, in its order (the order the
  // op draws index), magnitudes as the float32 values torchvision computes.
  std::vector<AugmentRange> augmentation_space(int width, int height) const;

  // Draws the policy's ops from rng and applies them to image.
  void apply(Image& image, SampleRng& rng) const;

 private:
  void apply_policy(Image& image, SampleRng& rng) const;
  void apply_random(Image& image, SampleRng& rng) const;
  void apply_trivial(Image& image, SampleRng& rng) const;
  void apply_augmix(Image& image, SampleRng& rng) const;
  // Draws one op of `space` and its magnitude (bin `bin`, or a random one of the first `bins`).
  void apply_drawn(const std::vector<AugmentRange>& space, std::optional<int> bin, int bins, Image& image,
                   SampleRng& rng) const;

  AutoAugmentOptions options_;
};

}  // namespace dpt::data
