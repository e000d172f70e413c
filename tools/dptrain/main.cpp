// dptrain: data-parallel training of image classifiers on LibTorch.
//
// This binary does not load LibTorch: it serves `dptrain launch` itself, so that launching costs
// milliseconds and the workers are the only processes that pay LibTorch's load time, and hands
// every other command to dptrain-torch, installed next to it.

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "command.h"

namespace {

std::string sibling(const char* name) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

// Runs the same command line in dptrain-torch; returns only when that cannot start.
int hand_over(char** argv) {
  const std::string full = sibling("dptrain-torch");
  execv(full.c_str(), argv);
  std::cerr << "dptrain: error: cannot run " << full << ": " << std::strerror(errno)
            << ". It is installed next to dptrain; reinstall or rebuild dptrain." << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "launch") {
    CLI::App app{"dptrain: data-parallel training of image classifiers on LibTorch", "dptrain"};
    app.require_subcommand(1);
    // An elastic launch needs LibTorch's c10d store for the launchers' rendezvous.
    auto elastic = [argv](const dpt::launch::LaunchOptions&, const std::vector<std::string>&,
                          const dpt::Environment&) { return hand_over(argv); };
    return dpt::cli::run_commands(app, {dpt::cli::add_launch_command(app, elastic)}, argc, argv);
  }
  return hand_over(argv);
}
