#include "dptrain/train/logs/summary_writer.h"

#include <cmath>

#include <fmt/format.h>

#include "dptrain/common/error.h"
#include "dptrain/common/host_name.h"
#include "event_file.h"

namespace dpt::train {
namespace fs = std::filesystem;
namespace {

void create_folder(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  DPT_CHECK(!error, ConfigError, "cannot create the TensorBoard folder ", dir.string(), ": ",
            error.message(), "; check the output path and its permissions");
}

}  // namespace

LogFile SummaryWriter::create_event_file(const SummaryWriterOptions& options) {
  create_folder(options.dir());
  const std::string host = options.hostname().empty() ? host_name() : options.hostname();
  const std::string name = fmt::format("events.out.tfevents.{:010d}.{}",
                                       static_cast<int64_t>(std::floor(options.clock()())), host);
  for (int attempt = 0;; ++attempt) {
    const fs::path path =
        options.dir() / (attempt == 0 ? name : fmt::format("{}.{}", name, attempt));
    if (auto file = LogFile::create_new(path)) return std::move(*file);
  }
}

SummaryWriter::SummaryWriter(const SummaryWriterOptions& options)
    : clock_(options.clock()), file_(create_event_file(options)) {
  file_.write(tf_record(file_version_event(clock_())));
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  file_.write(tf_record(scalar_event(clock_(), step, tag, static_cast<float>(value))));
}

}  // namespace dpt::train
