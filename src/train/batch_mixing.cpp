#include "dptrain/train/batch_mixing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "dptrain/common/error.h"

namespace dpt::train {

namespace {

// Beta(alpha, alpha) as torchvision draws it (the first coordinate of a Dirichlet sample), from
// a generator seeded by the batch's own stream.
double beta(data::SampleRng& rng, double alpha) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(rng.next());
  const at::Tensor concentration = at::full({2}, alpha, at::kDouble);
  return at::_sample_dirichlet(concentration, generator)[0].item<double>();
}

}  // namespace

BatchMixing::BatchMixing(BatchMixingOptions options, int64_t num_classes)
    : options_(options), num_classes_(num_classes) {
  DPT_CHECK(options_.mixup_alpha() >= 0 && options_.cutmix_alpha() >= 0, ConfigError,
            "--mixup-alpha and --cutmix-alpha must not be negative, got ", options_.mixup_alpha(), " and ",
            options_.cutmix_alpha());
}

MixDraw BatchMixing::draw(data::SampleRng& rng, int64_t height, int64_t width) const {
  DPT_ASSERT(enabled(), "BatchMixing::draw without mixup or cutmix");
  MixDraw d;
  // RandomChoice between the enabled two.
  const bool both = options_.mixup_alpha() > 0 && options_.cutmix_alpha() > 0;
  d.cutmix = both ? rng.uniform(0.0, 1.0) < 0.5 : options_.cutmix_alpha() > 0;
  d.lambda = beta(rng, d.cutmix ? options_.cutmix_alpha() : options_.mixup_alpha());
  if (d.cutmix) {
    d.center_x = rng.integer(0, width - 1);
    d.center_y = rng.integer(0, height - 1);
  }
  return d;
}

CutmixBox cutmix_box(const MixDraw& draw, int64_t height, int64_t width) {
  // A box of area (1 - lambda) of the image around the center, clipped to the image; the weight
  // follows the clipped area.
  const double r = 0.5 * std::sqrt(1.0 - draw.lambda);
  const auto half_w = static_cast<int64_t>(r * static_cast<double>(width));
  const auto half_h = static_cast<int64_t>(r * static_cast<double>(height));
  CutmixBox box;
  box.x1 = std::max<int64_t>(draw.center_x - half_w, 0);
  box.y1 = std::max<int64_t>(draw.center_y - half_h, 0);
  box.x2 = std::min(draw.center_x + half_w, width);
  box.y2 = std::min(draw.center_y + half_h, height);
  box.lambda = 1.0 - static_cast<double>((box.x2 - box.x1) * (box.y2 - box.y1)) / static_cast<double>(width * height);
  return box;
}

at::Tensor BatchMixing::apply(at::Tensor& images, const at::Tensor& labels, const MixDraw& draw) const {
  at::Tensor targets = at::one_hot(labels, num_classes_).to(images.scalar_type());
  at::Tensor rolled_targets = targets.roll(1, 0);
  double lambda = draw.lambda;
  if (draw.cutmix) {
    const CutmixBox box = cutmix_box(draw, images.size(2), images.size(3));
    using at::indexing::Slice;
    const std::vector<at::indexing::TensorIndex> window{Slice(), Slice(), Slice(box.y1, box.y2),
                                                        Slice(box.x1, box.x2)};
    images.index_put_(window, images.roll(1, 0).index(window));
    lambda = box.lambda;
  } else {
    at::Tensor rolled = images.roll(1, 0);
    images.mul_(lambda).add_(rolled.mul_(1.0 - lambda));
  }
  return targets.mul_(lambda).add_(rolled_targets.mul_(1.0 - lambda));
}

}  // namespace dpt::train
