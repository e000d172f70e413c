#include "dptrain/train/logs/sample_log.h"

#include <string>

#include "dptrain/common/error.h"
#include "dptrain/train/logs/timeline.h"

namespace dpt::train {

namespace fs = std::filesystem;

namespace {

LogFile open_sample_log(const fs::path& path) {
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  DPT_CHECK(!error, ConfigError, "cannot create the folder of the sample log ", path.string(), ": ", error.message(),
            "; check --sample-log's path and its permissions");
  return LogFile::append(path);
}

}  // namespace

SampleLog::SampleLog(const fs::path& path, int rank) : file_(open_sample_log(timeline_path(path, rank))) {}

void SampleLog::record(int64_t global_step, int64_t epoch, const std::vector<int64_t>& indices) {
  std::string line = std::to_string(global_step) + " " + std::to_string(epoch);
  for (int64_t index : indices) line.append(" ").append(std::to_string(index));
  file_.write(line.append("\n"));
}

}  // namespace dpt::train
