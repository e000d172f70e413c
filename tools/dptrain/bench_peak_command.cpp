// `dptrain bench-peak`: this machine's attainable FLOP/s per CPU thread (or per GPU with --gpu)
// for matrix products and convolutions in each precision (compute_peak.h), written where
// `dptrain train` looks for it, so that runs report their fraction of it (MFU). Prints a line per
// precision, then the file's JSON as its last line.

#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "command.h"
#include "compute_peak.h"
#include "number_bounds.h"
#include "dptrain/common/atomic_file.h"
#include "dptrain/common/error.h"
#include "dptrain/dist/cuda_device.h"

namespace dpt::cli {

namespace {

struct BenchPeakFlags {
  std::string output;
  std::optional<int> gpu;
  double seconds = 0.3;
};

int run_bench_peak(const BenchPeakFlags& flags) {
  PeakOptions options;
  if (flags.gpu) options.device = dist::cuda_device(*flags.gpu, "--gpu");
  options.seconds_per_kernel = flags.seconds;
  const nlohmann::json peak = measure_peak(options);
  for (const auto& [precision, rate] : peak["precisions"].items()) {
    std::cout << fmt::format("{:<5} matmul {:8.1f} GFLOP/s  conv {:8.1f} GFLOP/s  per {}\n", precision,
                             rate["matmul"].get<double>() / 1e9, rate["conv"].get<double>() / 1e9,
                             peak["unit"].get<std::string>());
  }
  const std::filesystem::path file = flags.output.empty() ? default_peak_file(Environment::current())
                                                                : std::filesystem::path(flags.output);
  std::error_code error;
  std::filesystem::create_directories(file.parent_path(), error);
  // Replaced whole: a `dptrain train` starting meanwhile reads the old rates or the new, never half a file.
  const std::string text = peak.dump(2) + "\n";
  try {
    write_file_atomically(file, [&](const ByteWriter& write) { write(text.data(), text.size()); });
  } catch (const CheckpointError& e) {
    throw ConfigError(str("bench-peak: ", e.what(), "; pass --output FILE somewhere writable"));
  }
  std::cout << "written to " << file.string() << "\n" << peak.dump() << std::endl;
  return 0;
}

}  // namespace

Command add_bench_peak_command(CLI::App& root) {
  auto flags = std::make_shared<BenchPeakFlags>();
  CLI::App* app = root.add_subcommand(
      "bench-peak", "Measure this machine's attainable FLOP/s (matmul, convolution; fp32, bf16) for MFU");
  app->add_option("--output", flags->output, "file to write (default: $XDG_CACHE_HOME/dptrain/peak.json)");
  app->add_option("--gpu", flags->gpu, "measure CUDA device N (fp16 too) instead of one CPU thread")
      ->check(at_least(0));
  app->add_option("--seconds", flags->seconds, "seconds each kernel shape is timed for")
      ->check(above(0))
      ->capture_default_str();
  return {app, [flags](const std::vector<std::string>&) { return run_bench_peak(*flags); }};
}

}  // namespace dpt::cli
