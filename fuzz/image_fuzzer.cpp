// libFuzzer target: a JPEG or PNG from outside through everything the loader does with it (data/
// image.h, data/transform.h). The first two bytes choose the transform (train or eval, the filter,
// DCT scaling, an augmentation policy, RandomErasing) and the region decode's rectangle; the rest
// is the file. A DataError is the expected answer to bad bytes; any other exception, a crash or a
// sanitizer report is a bug. Outputs are small (24-64 px) so that an execution stays short.
//
//   scripts/fuzz image 60        # builds with clang (ASan, UBSan) and runs for 60 s

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/image.h"
#include "dptrain/data/transform.h"

namespace {

using dpt::data::AutoAugmentOptions;
using dpt::data::AutoAugmentPolicy;
using dpt::data::Interpolation;
using dpt::data::Transform;
using dpt::data::TransformMode;
using dpt::data::TransformOptions;

TransformOptions options_from(uint8_t choice) {
  TransformOptions options;
  options.mode(choice & 1 ? TransformMode::Train : TransformMode::Eval)
      .size(24 + (choice >> 1 & 3) * 12)
      .interpolation(choice & 8 ? Interpolation::Bicubic : Interpolation::Bilinear)
      .dct_scaling(!(choice & 16))
      .erase_probability(choice & 32 ? 0.5 : 0.0);
  options.resize(options.size() + 8);
  if (choice & 64) options.auto_augment(AutoAugmentOptions().policy(static_cast<AutoAugmentPolicy>(choice % 6)));
  return options;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t choice = data[0], rect = data[1];
  const std::vector<uint8_t> bytes(data + 2, data + size);
  const Transform transform(options_from(choice));
  std::vector<float> out(transform.sample_numel());
  try {
    transform.apply_encoded(bytes, "fuzz", /*epoch=*/choice >> 4, /*index=*/rect, out.data());
  } catch (const dpt::DataError&) {
  }
  try {
    // The loader asks for a region inside the picture at a scale the format has (DCT scaling is
    // JPEG's): other requests are a caller's bug (InternalError), not bad bytes.
    const bool jpeg = dpt::data::sniff_format(bytes) == dpt::data::ImageFormat::Jpeg;
    if (!jpeg) {
      // A PNG decodes whole, whatever the rectangle; unasked by read_image_size here, since
      // decode_region is public and must refuse a bomb itself.
      dpt::data::decode_region(bytes, "fuzz", 1, {0, 0, 1, 1});
      return 0;
    }
    const int denominator = 1 << (rect & 3);
    const auto scaled = dpt::data::scaled_size(dpt::data::read_image_size(bytes, "fuzz"), denominator);
    if (scaled.width > 0 && scaled.height > 0) {
      const int left = (rect >> 2 & 7) % scaled.width, top = (rect >> 5) % scaled.height;
      const int width = 1 + (rect & 15) % (scaled.width - left), height = 1 + (rect >> 4) % (scaled.height - top);
      dpt::data::decode_region(bytes, "fuzz", denominator, {left, top, width, height});
    }
  } catch (const dpt::DataError&) {
  }
  return 0;
}
