#include "dptrain/train/logs/report.h"

#include "dptrain/common/error.h"

namespace dpt::train {

int64_t checked_print_freq(int64_t print_freq) {
  DPT_CHECK(print_freq >= 1, ConfigError, "--print-freq must be at least 1, got ", print_freq);
  return print_freq;
}

}  // namespace dpt::train
