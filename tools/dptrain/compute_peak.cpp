#include "compute_peak.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <vector>

#include <torch/cuda.h>

#include "bench_common.h"
#include "dptrain/common/cpu_platform.h"
#include "dptrain/common/error.h"
#include "dptrain/compat/compat.h"

namespace dpt::cli {
namespace {

// The fastest run of `kernel` over `seconds` (after one unmeasured run, which pays for oneDNN's
// primitive creation and the allocator's first touch): the attainable rate, not the typical one.
double best_seconds(const std::function<void()>& kernel, const PeakOptions& options) {
  const auto finish = [&] {
    if (options.device.is_cuda()) torch::cuda::synchronize();
  };
  kernel();
  finish();
  double best = std::numeric_limits<double>::infinity();
  const auto started = std::chrono::steady_clock::now();
  do {
    const auto start = std::chrono::steady_clock::now();
    kernel();
    finish();
    best = std::min(best, seconds_since(start));
  } while (seconds_since(started) < options.seconds_per_kernel);
  return best;
}

// A kernel run this long is far past any fixed cost: a larger one would only say the same, slower.
// It happens where LibTorch emulates a precision (bf16 products without bf16 units: about
// 1 GFLOP/s, where the CPU's fp32 does 50), and bounds bench-peak's time there.
constexpr double kLongEnoughSeconds = 0.5;

// n x n by n x n products: 2 n^3 FLOPs. The larger size only when the smaller was quick.
double matmul_rate(at::ScalarType dtype, const PeakOptions& options) {
  torch::NoGradGuard no_grad;
  const std::vector<int64_t> sizes = options.device.is_cuda() ? std::vector<int64_t>{4096, 8192}
                                                              : std::vector<int64_t>{1024, 2048};
  double best = 0;
  for (const int64_t n : sizes) {
    const auto on = torch::TensorOptions().dtype(dtype).device(options.device);
    const auto a = torch::randn({n, n}, on), b = torch::randn({n, n}, on);
    const double seconds = best_seconds([&] { torch::mm(a, b); }, options);
    best = std::max(best, 2.0 * n * n * n / seconds);
    if (seconds > kLongEnoughSeconds) break;
  }
  return best;
}

// ResNet-50's 3x3 stages and a 1x1 bottleneck, channels_last, forward and backward (the gradients
// of input and weight): 3 x 2 x multiply-adds. Each stage has about 0.12 G multiply-adds per image;
// the batch is what a run at `matmul_rate` does in kLongEnoughSeconds, at most 16 (128 on a GPU).
double conv_rate(at::ScalarType dtype, double matmul_rate, const PeakOptions& options) {
  struct Shape {
    int64_t channels, side, kernel, out_channels;
  };
  constexpr double kFlopsPerImage = 6 * 0.116e9;
  const int64_t largest = options.device.is_cuda() ? 128 : 16;
  const int64_t batch =
      std::clamp<int64_t>(static_cast<int64_t>(kLongEnoughSeconds * matmul_rate / kFlopsPerImage), 1, largest);
  double best = 0;
  for (const Shape s : {Shape{64, 56, 3, 64}, Shape{128, 28, 3, 128}, Shape{256, 14, 3, 256},
                        Shape{512, 7, 3, 512}, Shape{256, 56, 1, 64}}) {
    const auto on = torch::TensorOptions().dtype(dtype).device(options.device);
    const auto x = torch::randn({batch, s.channels, s.side, s.side}, on)
                       .contiguous(at::MemoryFormat::ChannelsLast)
                       .requires_grad_();
    const auto w = torch::randn({s.out_channels, s.channels, s.kernel, s.kernel}, on)
                       .contiguous(at::MemoryFormat::ChannelsLast)
                       .requires_grad_();
    const auto run = [&] {
      const auto y = torch::conv2d(x, w, {}, 1, s.kernel / 2);
      y.backward(torch::ones_like(y));
    };
    const double seconds = best_seconds(run, options);
    const double macs = static_cast<double>(batch) * s.out_channels * s.side * s.side * s.channels * s.kernel * s.kernel;
    best = std::max(best, 6.0 * macs / seconds);
  }
  return best;
}

}  // namespace

nlohmann::json measure_peak(const PeakOptions& options) {
  const int threads = at::get_num_threads();
  if (options.device.is_cpu()) at::set_num_threads(1);  // per core: ranks x threads of them run
  std::vector<std::pair<const char*, at::ScalarType>> precisions = {{"fp32", at::kFloat}, {"bf16", at::kBFloat16}};
  if (options.device.is_cuda()) precisions.emplace_back("fp16", at::kHalf);
  nlohmann::json rates = nlohmann::json::object();
  for (const auto& [name, dtype] : precisions) {
    const double matmul = matmul_rate(dtype, options);
    const double conv = conv_rate(dtype, matmul, options);
    rates[name] = {{"matmul", matmul}, {"conv", conv}, {"peak", std::max(matmul, conv)}};
  }
  at::set_num_threads(threads);
  return {{"device", options.device.is_cuda() ? "cuda" : "cpu"},
          {"cpu", cpu_features().model},
          {"libtorch", compat::torch_version()},
          {"unit", options.device.is_cuda() ? "one GPU" : "one CPU thread"},
          {"precisions", rates}};
}

std::filesystem::path default_peak_file(const Environment& env) {
  if (auto cache = env.get("XDG_CACHE_HOME"); cache && !cache->empty()) {
    return std::filesystem::path(*cache) / "dptrain" / "peak.json";
  }
  return std::filesystem::path(env.get("HOME").value_or("/tmp")) / ".cache" / "dptrain" / "peak.json";
}

std::optional<double> measured_peak(const std::filesystem::path& file, const std::string& precision,
                                    const std::string& device) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  // A file from another machine or LibTorch (a shared home folder) does not describe this one.
  const auto peak = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!peak.is_object() || peak.value("device", "") != device || peak.value("cpu", "") != cpu_features().model ||
      peak.value("libtorch", "") != compat::torch_version()) {
    return std::nullopt;
  }
  try {
    const double rate = peak.value(nlohmann::json::json_pointer("/precisions/" + precision + "/peak"), 0.0);
    if (rate > 0) return rate;
  } catch (const nlohmann::json::exception&) {  // a field of another type: not a file of ours
  }
  return std::nullopt;
}

}  // namespace dpt::cli
