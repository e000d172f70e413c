#pragma once
// One worker's output on its way to the terminal or a log file: bytes from its stdout and stderr
// are cut into whole lines, each line gets the worker's prefix and goes to the launcher's stream
// of the same kind, and the last lines of both are kept, in arrival order, for failure reports.

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace dpt::launch {

class WorkerOutput {
 public:
  enum Stream { kOut = 0, kErr = 1 };

  // Lines go to stdout/stderr with `prefix` in front or, when `log` is set, to the log unprefixed.
  WorkerOutput(std::string prefix, std::shared_ptr<std::FILE> log, size_t tail_lines);

  // Feeds raw bytes as they arrive; complete lines are written at once.
  void feed(Stream stream, const char* data, size_t size);
  // Writes last lines that had no newline (the worker exited mid-line).
  void flush_partial();
  // The last `tail_lines` complete lines, oldest first.
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void emit(Stream stream, const std::string& line);

  std::string prefix_;
  std::shared_ptr<std::FILE> log_;
  size_t tail_lines_;
  std::string partial_[2];
  std::deque<std::string> tail_;
};

}  // namespace dpt::launch
