// libFuzzer target: a CIFAR-10 binary file from outside (data/cifar.h), read as a split and every
// record of it transformed (train mode, with augmentation when the first byte's low bit is set).
// A DataError is the expected answer to a file that is not whole records or holds a label above
// 9; any other exception, a crash or a sanitizer report is a bug.
//
//   scripts/fuzz cifar 60

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dpt::data;
  if (size < 1) return 0;
  TransformOptions options;
  options.mode(TransformMode::Train).size(32).resize(32).erase_probability(0.5);
  if (data[0] & 1) options.auto_augment(AutoAugmentOptions().policy(AutoAugmentPolicy::Cifar10));
  try {
    const Cifar10 split(std::vector<uint8_t>(data + 1, data + size), "fuzz.bin", Transform(options));
    std::vector<float> out(3 * 32 * 32);
    for (int64_t i = 0; i < split.size(); ++i) split.get(i, /*epoch=*/data[0], out.data());
  } catch (const dpt::DataError&) {
  }
  return 0;
}
