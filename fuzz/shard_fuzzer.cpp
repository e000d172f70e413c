// libFuzzer target: a tar shard from outside (data/tar_archive.h, data/shard_index.h), scanned,
// indexed under either bad-sample policy, and every sample's image decoded and transformed. A
// DataError is the expected answer to a damaged archive, a sample without its image or label, or
// bytes that are no image; any other exception, a crash or a sanitizer report is a bug.
//
//   scripts/fuzz shard 60

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dptrain/common/error.h"
#include "dptrain/data/shard_index.h"
#include "dptrain/data/tar_archive.h"
#include "dptrain/data/transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dpt::data;
  const auto archive_size = static_cast<int64_t>(size);
  const ReadAt read_at = [&](int64_t offset, int64_t length, char* out) -> int64_t {
    if (offset < 0 || length < 0 || offset >= archive_size) return 0;
    const int64_t n = std::min(length, archive_size - offset);
    std::memcpy(out, data + offset, static_cast<size_t>(n));
    return n;
  };
  const Transform transform(TransformOptions().mode(TransformMode::Train).size(16));
  std::vector<float> out(3 * 16 * 16);
  for (BadImagePolicy policy : {BadImagePolicy::Error, BadImagePolicy::Skip}) {
    try {
      const ShardIndex index =
          index_shard(scan_tar(read_at, archive_size, "fuzz.tar"), read_at, archive_size, "fuzz.tar", policy);
      for (const ShardSample& sample : index.samples) {
        std::vector<uint8_t> bytes(static_cast<size_t>(sample.size));
        if (read_at(sample.offset, sample.size, reinterpret_cast<char*>(bytes.data())) != sample.size) __builtin_trap();
        try {
          transform.apply_encoded(bytes, sample.key, /*epoch=*/0, /*index=*/0, out.data());
        } catch (const dpt::DataError&) {
        }
      }
      const ShardIndex again = parse_shard_index(format_shard_index(index), "fuzz.idx");
      if (again.samples.size() != index.samples.size()) __builtin_trap();
    } catch (const dpt::DataError&) {
    }
  }
  return 0;
}
