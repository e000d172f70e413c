#pragma once
// Runs a Python snippet under the oracle Python (the build's DPTRAIN_PYTHON: /usr/bin/python3,
// which has torch and torchvision, or a GPU machine's own) and returns what it printed, for unit
// tests whose expected values come from PyTorch itself.
//
//   auto out = dpt::testing::run_python("import torch; print(torch.randperm(4).tolist())");
//   if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpt::testing {

// Whether the tests run in CI (CI set and not empty, as .ci/run sets it), where every dependency
// is installed.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0';
}

// Skips the calling test for a missing dependency, or in CI fails it: there a skip would let a
// broken install pass unseen (tests/proc.py's cannot_run does the same for the Python tests).
#define DPT_MISSING_DEPENDENCY(why)                                                         \
  do {                                                                                      \
    if (::dpt::testing::in_ci()) FAIL() << (why) << " (CI is set: every dependency must be installed)"; \
    GTEST_SKIP() << (why);                                                                  \
  } while (0)

inline std::string oracle_missing(const std::string& module) {
  return std::string(DPTRAIN_ORACLE_PYTHON) + " with " + module + " is not available";
}

// stdout of the script, or nullopt when the oracle Python is missing or lacks torch or torchvision
// (the test then calls DPT_MISSING_DEPENDENCY). A script that fails for any other reason throws,
// so the test fails.
inline std::optional<std::string> run_python(const std::string& script) {
  char path[] = "/tmp/dptrain_oracle_XXXXXX.py";
  int fd = mkstemps(path, 3);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for the Python oracle");
  close(fd);
  std::ofstream(path) << "import sys\n"
                         "try:\n"
                         "    import torch, torchvision\n"
                         "except ImportError:\n"
                         "    print('DPT_ORACLE_MISSING')\n"
                         "    sys.exit(0)\n"
                      << script;
  FILE* pipe = popen((std::string(DPTRAIN_ORACLE_PYTHON) + " " + path + " 2>&1").c_str(), "r");
  std::string out;
  if (pipe) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  }
  const int rc = pipe ? pclose(pipe) : -1;
  std::remove(path);
  if (!pipe || (WIFEXITED(rc) && WEXITSTATUS(rc) == 127)) return std::nullopt;  // no such Python
  if (out.rfind("DPT_ORACLE_MISSING", 0) == 0) return std::nullopt;
  if (rc != 0) throw std::runtime_error("Python oracle script failed:\n" + out);
  return out;
}

// Splits "1 2 3\n4 5\n" into lines of numbers.
template <typename T = int64_t>
std::vector<std::vector<T>> parse_lines(const std::string& text) {
  std::vector<std::vector<T>> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream items(line);
    std::vector<T> values;
    T v;
    while (items >> v) values.push_back(v);
    lines.push_back(std::move(values));
  }
  return lines;
}

}  // namespace dpt::testing
