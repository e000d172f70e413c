#include "seconds_flag.h"

#include <cstdint>

#include "dptrain/common/error.h"

namespace dpt::cli {

std::chrono::milliseconds milliseconds(double seconds, const std::string& flag) {
  DPT_CHECK(seconds >= 0 && seconds <= kMaxSeconds, ConfigError, flag, " takes seconds from 0 to ", kMaxSeconds,
            ", got ", seconds);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::optional<std::chrono::milliseconds> milliseconds(const std::optional<double>& seconds, const std::string& flag) {
  if (!seconds) return std::nullopt;
  return milliseconds(*seconds, flag);
}

}  // namespace dpt::cli
