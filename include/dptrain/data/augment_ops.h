#pragma once
// The image operations of torchvision's AutoAugment family (transforms.autoaugment._apply_op),
// each computed as torchvision.transforms.v1 computes it on the PIL image that ImageFolder loads:
// Pillow's affine filters, ImageEnhance blends and ImageOps lookup tables, with their float and
// fixed-point arithmetic, so that the bytes come out equal.
//
//   dpt::data::Image crop = ...;                                   // size x size RGB
//   dpt::data::apply_augment_op(crop, dpt::data::AugmentOp::Rotate, -12.0, Interpolation::Bilinear);

#include <string>

#include "dptrain/data/image.h"
#include "dptrain/data/interpolation.h"

namespace dpt::data {

enum class AugmentOp {
  Identity,
  ShearX,
  ShearY,
  TranslateX,
  TranslateY,
  Rotate,
  Brightness,
  Color,
  Contrast,
  Sharpness,
  Posterize,
  Solarize,
  AutoContrast,
  Equalize,
  Invert,
};

// torchvision's name of the op ("ShearX", "AutoContrast", ...); ConfigError for other names.
const char* to_string(AugmentOp op);
AugmentOp parse_augment_op(const std::string& name);

// Applies `op` in place with torchvision's meaning of the magnitude:
//   ShearX/Y      the shear's tangent (the image is sheared about its top-left corner)
//   TranslateX/Y  pixels, truncated towards zero
//   Rotate        degrees, counterclockwise, about the image centre
//   Brightness, Color, Contrast, Sharpness   the enhancement factor minus one
//   Posterize     bits kept (truncated), Solarize  the threshold; the rest take none.
// Geometric ops sample with Pillow's bilinear or bicubic transform filter and fill with black.
void apply_augment_op(Image& image, AugmentOp op, double magnitude, Interpolation interpolation);

}  // namespace dpt::data
