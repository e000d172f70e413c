#include "dptrain/data/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "dptrain/common/error.h"

using namespace dpt::data;

TEST(SyntheticDataset, DeterministicAndClassDependent) {
  Transform t(TransformOptions().size(16).resize(16));
  SyntheticDataset a(SyntheticOptions().size(20).num_classes(4).image_size(16), t);
  SyntheticDataset b(SyntheticOptions().size(20).num_classes(4).image_size(16), t);
  SyntheticDataset other(SyntheticOptions().size(20).num_classes(4).image_size(16).seed(1), t);
  EXPECT_EQ(a.render(5).pixels, b.render(5).pixels);
  EXPECT_NE(a.render(5).pixels, other.render(5).pixels);
  EXPECT_EQ(a.label(5), 1);
  EXPECT_EQ(a.sample_shape(), (std::vector<int64_t>{3, 16, 16}));
  std::vector<float> x(a.sample_numel()), y(a.sample_numel());
  EXPECT_EQ(a.get(6, 0, x.data()), 2);
  b.get(6, 0, y.data());
  EXPECT_EQ(x, y);
  EXPECT_THROW(a.get(20, 0, x.data()), dpt::DataError);
}

// With three classes the hues are red, green and blue: only class c has pixels where channel c
// stands far above the other two (the noisy grey background never does).
TEST(SyntheticDataset, ClassesHaveDistinctColours) {
  SyntheticDataset ds(SyntheticOptions().size(30).num_classes(3).image_size(32),
                      Transform(TransformOptions().size(32).resize(32)));
  for (int64_t i = 0; i < 30; ++i) {
    const Image im = ds.render(i);
    std::array<int, 3> strong{};
    for (size_t p = 0; p < im.pixels.size(); p += 3) {
      for (int c = 0; c < 3; ++c) {
        const int others = std::max(im.pixels[p + (c + 1) % 3], im.pixels[p + (c + 2) % 3]);
        strong[c] += im.pixels[p + c] - others > 110;
      }
    }
    for (int c = 0; c < 3; ++c) {
      if (c == ds.label(i)) {
        EXPECT_GE(strong[c], 10) << "sample " << i;
      } else {
        EXPECT_EQ(strong[c], 0) << "sample " << i << " channel " << c;
      }
    }
  }
}
