#include "dptrain/data/dataset.h"

#include "dptrain/common/error.h"

namespace dpt::data {

BadImagePolicy parse_bad_image_policy(const std::string& name) {
  if (name == "fail") return BadImagePolicy::Error;
  DPT_CHECK(name == "skip", ConfigError, "unknown bad-image policy '", name, "'; use skip or fail");
  return BadImagePolicy::Skip;
}

std::string to_string(BadImagePolicy policy) { return policy == BadImagePolicy::Error ? "fail" : "skip"; }

int64_t Dataset::sample_numel() const {
  int64_t n = 1;
  for (int64_t d : sample_shape()) n *= d;
  return n;
}

void Dataset::check_index(int64_t index) const {
  DPT_CHECK(index >= 0 && index < size(), DataError, "sample index ", index, " is outside the dataset of ", size(),
            " samples");
}

}  // namespace dpt::data
