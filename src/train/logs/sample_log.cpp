#include "dptrain/train/logs/sample_log.h"

#include <string>

#include "dptrain/train/logs/timeline.h"

namespace dpt::train {

SampleLog::SampleLog(const std::filesystem::path& path, int rank)
    : file_(LogFile::append_creating_folder(timeline_path(path, rank), "sample log", "--sample-log")) {}

void SampleLog::record(int64_t global_step, int64_t epoch, const std::vector<int64_t>& indices) {
  std::string line = std::to_string(global_step) + " " + std::to_string(epoch);
  for (int64_t index : indices) line.append(" ").append(std::to_string(index));
  file_.write(line.append("\n"));
}

void SampleLog::drop(int64_t global_step) { file_.write("dropped " + std::to_string(global_step) + "\n"); }

void SampleLog::joined(int64_t global_step) { file_.write("joined " + std::to_string(global_step) + "\n"); }

}  // namespace dpt::train
