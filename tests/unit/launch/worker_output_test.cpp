#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "dptrain/launch/worker_output.h"

using dpt::launch::WorkerOutput;

namespace {

std::string contents(std::FILE* file) {
  std::rewind(file);
  std::string text;
  char buffer[256];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  return text;
}

}  // namespace

TEST(WorkerOutput, CutsBytesIntoLinesAndKeepsTheLastOnes) {
  std::shared_ptr<std::FILE> log(std::tmpfile(), std::fclose);
  WorkerOutput output("[rank 1] ", log, /*tail_lines=*/2);
  output.feed(WorkerOutput::kOut, "one\ntw", 6);
  output.feed(WorkerOutput::kErr, "error ", 6);
  output.feed(WorkerOutput::kOut, "o\nthree\n", 8);
  EXPECT_EQ(contents(log.get()), "one\ntwo\nthree\n");  // log files carry no prefix
  EXPECT_EQ(output.tail(), (std::vector<std::string>{"two", "three"}));
  output.flush_partial();
  EXPECT_EQ(output.tail(), (std::vector<std::string>{"three", "error "}));
  EXPECT_EQ(contents(log.get()), "one\ntwo\nthree\nerror \n");
}
