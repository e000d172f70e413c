#include "dptrain/train/bad_images.h"

#include <algorithm>
#include <cmath>

#include "dptrain/common/error.h"

namespace dpt::train {

namespace {

// The first few of this rank's skipped images: enough to find the pattern (one folder, one
// encoder), few enough for one log line each.
constexpr size_t kNamed = 3;

std::string first_named(const std::vector<data::SkippedSample>& here) {
  if (here.empty()) return " None of them on this rank.";
  std::string text =
      here.size() <= kNamed ? str(" This rank's:") : str(" The first ", kNamed, " of this rank's ", here.size(), ":");
  for (size_t i = 0; i < std::min(here.size(), kNamed); ++i) text += "\n    " + here[i].what;
  return text;
}

}  // namespace

BadImages::BadImages(double max_fraction) : max_fraction_(max_fraction) {
  DPT_CHECK(max_fraction >= 0 && max_fraction <= 1, ConfigError, "--max-bad-images takes a fraction of a pass's "
            "images between 0 and 1, got ", max_fraction);
}

int64_t BadImages::allowed(int64_t images) const {
  return static_cast<int64_t>(std::floor(max_fraction_ * static_cast<double>(images)));
}

void BadImages::check(const BadImagePass& pass) const {
  if (pass.skipped <= allowed(pass.images)) return;
  throw DataError(str(pass.name, ": ", pass.skipped, " bad images skipped so far, more than the ", allowed(pass.images),
                      " (--max-bad-images ", max_fraction_, " of the pass's ", pass.images,
                      ") that a run may skip; it stops here, before its next checkpoint.", first_named(pass.here),
                      "\nRepair or remove them (dptrain reads JPEG and PNG), or raise --max-bad-images."));
}

std::string BadImages::finish(const BadImagePass& pass) const {
  if (pass.usable == 0 && pass.skipped > 0) {
    throw DataError(str(pass.name, ": no usable image: all ", pass.skipped, " read were bad.", first_named(pass.here),
                        "\nRepair or remove them (dptrain reads JPEG and PNG)."));
  }
  check(pass);
  if (pass.skipped == 0) return "";
  return str("data: ", pass.name, ": ", pass.skipped, " bad image(s) skipped (all ranks; at most ",
             allowed(pass.images), " of ", pass.images, " allowed by --max-bad-images).", first_named(pass.here));
}

}  // namespace dpt::train
