#pragma once
// Small measurements the bench commands share.

#include <sys/resource.h>

#include <chrono>
#include <cstdint>

namespace dpt::cli {

// The largest resident set this process has had, in MiB.
inline double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What this process (all its threads) has spent so far, as getrusage counts it; the difference
// of two snapshots is what a measured stretch spent. With several threads it tells why they did
// not scale: CPU seconds under threads x wall seconds mean they waited (for a lock, for work, or
// for a core: involuntary switches), kernel seconds mean faults or system calls.
struct ProcessUsage {
  double user_seconds = 0;
  double system_seconds = 0;
  int64_t minor_faults = 0;
  int64_t voluntary_switches = 0;    // the thread waited (a lock, a condition, I/O)
  int64_t involuntary_switches = 0;  // the scheduler took the core away

  static ProcessUsage now() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
    return {seconds(usage.ru_utime), seconds(usage.ru_stime), usage.ru_minflt, usage.ru_nvcsw, usage.ru_nivcsw};
  }
  double cpu_seconds() const { return user_seconds + system_seconds; }
  ProcessUsage operator-(const ProcessUsage& earlier) const {
    return {user_seconds - earlier.user_seconds, system_seconds - earlier.system_seconds,
            minor_faults - earlier.minor_faults, voluntary_switches - earlier.voluntary_switches,
            involuntary_switches - earlier.involuntary_switches};
  }
};

}  // namespace dpt::cli
