#include "dptrain/data/interpolation.h"

#include "dptrain/common/error.h"

namespace dpt::data {

Interpolation parse_interpolation(const std::string& name) {
  if (name == "bicubic") return Interpolation::Bicubic;
  DPT_CHECK(name == "bilinear", ConfigError, "unknown interpolation '", name, "'; use bilinear or bicubic");
  return Interpolation::Bilinear;
}

std::string to_string(Interpolation interpolation) {
  return interpolation == Interpolation::Bicubic ? "bicubic" : "bilinear";
}

}  // namespace dpt::data
