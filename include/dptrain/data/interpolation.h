#pragma once
// The resampling filters of the image transforms, as PIL defines them (what torchvision's
// transforms run on the PIL images ImageFolder loads): both antialias when shrinking.

#include <string>

namespace dpt::data {

enum class Interpolation {
  Bilinear,  // triangle filter, support 1 (torchvision's default)
  Bicubic,   // cubic convolution with a = -0.5, support 2 (EfficientNet's and DeiT's recipes)
};

// "bilinear" / "bicubic", torchvision's InterpolationMode values; ConfigError naming them otherwise.
Interpolation parse_interpolation(const std::string& name);
std::string to_string(Interpolation interpolation);

}  // namespace dpt::data
