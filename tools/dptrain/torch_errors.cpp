#include "torch_errors.h"

namespace dpt::cli {
namespace {

bool says(const std::string& message, const char* words) { return message.find(words) != std::string::npos; }

// What to do, for the failures a user's flags cause; empty for the rest.
std::string advice(const std::string& message) {
  if (says(message, "out of memory") || says(message, "not enough memory") || says(message, "can't allocate memory")) {
    return "the process ran out of memory: lower -b (images per process) or --image-size, or pick a smaller "
           "model (-a); --amp also halves the activations' memory";
  }
  if (says(message, "Output size is too small") || says(message, "Kernel size can't be greater than actual input")) {
    return "the images are too small for this model: raise --image-size (`dptrain models` lists the size each "
           "model was made for)";
  }
  if (says(message, "Expected more than 1 value per channel when training")) {
    return "a batch of one image reached a BatchNorm whose input has shrunk to 1x1: an epoch's last batch holds "
           "the training images each process takes modulo -b, so pick a -b that does not leave 1 (or raise "
           "--image-size)";
  }
  return "";
}

}  // namespace

std::string describe_torch_error(const c10::Error& error, const Environment& env) {
  const std::string message = error.what_without_backtrace();
  const std::string what_to_do = advice(message);
  if (env.get("TORCH_SHOW_CPP_STACKTRACES").value_or("0") != "0") {
    return "LibTorch: " + std::string(error.what()) + (what_to_do.empty() ? "" : "\n" + what_to_do);
  }
  return "LibTorch: " + message + (what_to_do.empty() ? "" : "; " + what_to_do) +
         " (TORCH_SHOW_CPP_STACKTRACES=1 shows where in LibTorch)";
}

}  // namespace dpt::cli
