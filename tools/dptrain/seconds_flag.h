#pragma once
// A flag's seconds as the library's durations, for every command (`launch` included, which has no
// LibTorch). Seconds outside [0, kMaxSeconds], NaN included, are a ConfigError naming the flag:
// converting a double that fits no integer to milliseconds is undefined.

#include <chrono>
#include <optional>
#include <string>

namespace dpt::cli {

inline constexpr double kMaxSeconds = 1e9;  // about 31 years: far beyond any bound, far inside int64 ms

std::chrono::milliseconds milliseconds(double seconds, const std::string& flag);
// nullopt stays unset.
std::optional<std::chrono::milliseconds> milliseconds(const std::optional<double>& seconds, const std::string& flag);

}  // namespace dpt::cli
