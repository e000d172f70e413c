#pragma once
// What the command-line fuzz targets share: the input's lines as arguments, and a run through
// run_commands as the program makes it, its messages held back, where exit status 1 (an exception
// that left dptrain's error handling: neither a usage error nor a ConfigError) is a crash.
//
//   std::vector<std::string> args = {"dptrain", "launch"};
//   append_lines(data, size, args);
//   expect_a_handled_answer(app, commands, args);

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"

// Each line of the input as one more argument.
inline void append_lines(const uint8_t* data, size_t size, std::vector<std::string>& args) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) args.push_back(line);
}

inline void expect_a_handled_answer(CLI::App& app, const std::vector<dpt::cli::Command>& commands,
                                    std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  std::ostringstream quiet;  // CLI11's usage messages and dptrain's one-line errors
  auto* out = std::cout.rdbuf(quiet.rdbuf());
  auto* err = std::cerr.rdbuf(quiet.rdbuf());
  const int status = dpt::cli::run_commands(app, commands, static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  if (status == 1) {
    std::cerr << quiet.str();
    std::abort();
  }
}
