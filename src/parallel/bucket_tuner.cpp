#include "dptrain/parallel/bucket_tuner.h"

#include <algorithm>

#include "dptrain/common/error.h"

namespace dpt {

BucketTuner::BucketTuner(int64_t gradient_bytes, BucketTunerOptions options) : options_(std::move(options)) {
  DPT_CHECK(!options_.candidates_mb().empty() && options_.warmup_steps() >= 0 && options_.measured_steps() >= 1,
            ConfigError, "the bucket tuner needs a candidate and a measured step at least");
  const double gradient_mb = static_cast<double>(gradient_bytes) / (1024.0 * 1024.0);
  for (double mb : options_.candidates_mb()) {
    DPT_CHECK(mb > 0, ConfigError, "bucket tuner candidates must lie above 0 MiB, got ", mb);
    candidates_.push_back(mb);
    if (mb >= gradient_mb) break;  // one bucket already: larger caps change nothing
  }
  chosen_mb_ = candidates_.front();
  if (candidates_.size() == 1) candidate_ = 1;  // one bucket whatever the size: nothing to measure
}

double BucketTuner::current_mb() const { return done() ? chosen_mb_ : candidates_[candidate_]; }

int BucketTuner::steps() const {
  return static_cast<int>(candidates_.size()) * (options_.warmup_steps() + options_.measured_steps());
}

std::optional<double> BucketTuner::record(double seconds) {
  if (done()) return std::nullopt;
  const int measured = ++steps_taken_ - options_.warmup_steps();
  if (measured <= 0) return std::nullopt;
  if (mean_seconds_.size() <= candidate_) mean_seconds_.push_back(0);
  mean_seconds_[candidate_] += (seconds - mean_seconds_[candidate_]) / measured;
  if (measured < options_.measured_steps()) return std::nullopt;
  steps_taken_ = 0;
  if (++candidate_ < candidates_.size()) return candidates_[candidate_];
  chosen_mb_ = candidates_[std::min_element(mean_seconds_.begin(), mean_seconds_.end()) - mean_seconds_.begin()];
  // The last candidate's buckets are in place already when it is the choice.
  return chosen_mb_ == candidates_.back() ? std::nullopt : std::optional<double>(chosen_mb_);
}

std::string BucketTuner::describe() const {
  std::string text = str(current_mb(), " MiB (");
  for (size_t i = 0; i < mean_seconds_.size(); ++i) {
    text += str(i ? ", " : "", candidates_[i], ": ", static_cast<int64_t>(mean_seconds_[i] * 1000 + 0.5), " ms");
  }
  return text + ")";
}

}  // namespace dpt
