#pragma once
// Bad images are skipped and counted, never silently. After every pass each rank's log names how
// many images all ranks skipped and the first few of its own with the decoder's reason; a pass
// with no usable image, or one whose skipped images pass a bound (a fraction of the pass), stops
// the run with DataError. The counts come from collectives (the metrics all-reduce during
// training, the pass's sums at its end), so every rank stops at the same step, before the
// checkpoint that step would write.
//
//   dpt::train::BadImages bad(options.max_fraction);
//   bad.check(BadImagePass{"epoch 0 train", skipped_all_ranks, usable, images, loader.skipped()});  // mid-pass
//   log << bad.finish(pass);                                      // the pass's line; throws past the bound

#include <cstdint>
#include <string>
#include <vector>

#include "dptrain/data/loader.h"

namespace dpt::train {

// What one pass (over all ranks) did with its images.
struct BadImagePass {
  std::string name;        // "epoch 3 train", "epoch 3 val"
  int64_t skipped = 0;     // bad images skipped so far, all ranks
  int64_t usable = 0;      // images trained or evaluated on so far, all ranks
  int64_t images = 0;      // images the whole pass holds, all ranks
  std::vector<data::SkippedSample> here;  // this rank's skipped samples, in order
};

class BadImages {
 public:
  // `max_fraction`: more than this fraction of a pass's images bad stops the run (1: never).
  explicit BadImages(double max_fraction);

  // During a pass: throws DataError once the skipped images are past the bound.
  void check(const BadImagePass& pass) const;

  // At a pass's end: throws DataError past the bound or when no image was usable; else the line
  // for the log ("" when nothing was skipped).
  std::string finish(const BadImagePass& pass) const;

  // How many of a pass of `images` may be bad.
  int64_t allowed(int64_t images) const;

 private:
  double max_fraction_;
};

}  // namespace dpt::train
