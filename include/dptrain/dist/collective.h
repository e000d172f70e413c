#pragma once
// The words every collective shares: the reduction and the default bound.

#include <chrono>
#include <string>

namespace dpt::dist {

enum class ReduceOp { Sum, Mean, Max, Min };
std::string to_string(ReduceOp op);

// The default bound on one collective, as PyTorch's (but enforced: a hung peer ends the job).
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

}  // namespace dpt::dist
