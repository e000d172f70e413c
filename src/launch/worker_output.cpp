#include "dptrain/launch/worker_output.h"

namespace dpt::launch {

WorkerOutput::WorkerOutput(std::string prefix, std::shared_ptr<std::FILE> log, size_t tail_lines)
    : prefix_(std::move(prefix)), log_(std::move(log)), tail_lines_(tail_lines) {}

void WorkerOutput::feed(Stream stream, const char* data, size_t size) {
  std::string& partial = partial_[stream];
  partial.append(data, size);
  size_t start = 0;
  for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos; start = newline + 1) {
    emit(stream, partial.substr(start, newline - start));
  }
  partial.erase(0, start);
}

void WorkerOutput::flush_partial() {
  for (Stream stream : {kOut, kErr}) {
    if (!partial_[stream].empty()) emit(stream, partial_[stream]);
    partial_[stream].clear();
  }
}

void WorkerOutput::emit(Stream stream, const std::string& line) {
  // One fwrite per line keeps the lines of different workers from interleaving mid-line.
  std::string out = log_ ? line + "\n" : prefix_ + line + "\n";
  std::FILE* target = log_ ? log_.get() : (stream == kOut ? stdout : stderr);
  std::fwrite(out.data(), 1, out.size(), target);
  std::fflush(target);
  tail_.push_back(line);
  if (tail_.size() > tail_lines_) tail_.pop_front();
}

}  // namespace dpt::launch
