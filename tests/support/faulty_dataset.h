#pragma once
// small_synthetic(size, 9) with one bad sample, for the loader's and the prefetcher's tests: reading
// it throws a DataError (a corrupt image: skipped and counted under BadImagePolicy::Skip) or, when
// `crash` is set, a plain runtime_error (a bug: always rethrown).
//
//   Loader loader(std::make_shared<dpt::testing::FaultyDataset>(/*size=*/10, /*bad=*/5), indices, 0, options);

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dptrain/common/error.h"
#include "support/small_synthetic.h"

namespace dpt::testing {

class FaultyDataset : public dpt::data::Dataset {
 public:
  FaultyDataset(int64_t size, int64_t bad, bool crash = false)
      : inner_(small_synthetic(size, 9)), bad_(bad), crash_(crash) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::vector<int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int64_t get(int64_t index, int64_t epoch, float* out) const override {
    if (index == bad_ && crash_) throw std::runtime_error("worker blew up on sample " + std::to_string(index));
    if (index == bad_) throw dpt::DataError("cannot decode JPEG broken.jpg: bad Huffman table");
    return inner_->get(index, epoch, out);
  }
  std::string describe(int64_t index) const override { return inner_->describe(index); }

 private:
  std::shared_ptr<const dpt::data::Dataset> inner_;
  int64_t bad_;
  bool crash_;
};

}  // namespace dpt::testing
