// libFuzzer target: `dptrain train`'s command line (tools/dptrain/train_flags.cpp and the run flags
// it shares with `dptrain eval`, run_flags.cpp): CLI11's parse of the flags with dptrain's parsers
// of --mode, --opt, --lr-schedule, --lr-scheduler, --auto-augment, --interpolation and
// --bad-images, the check of flags given for another --mode, the options' checks that every rank
// makes before anything is read (train::check_options) and, with --multiprocessing-distributed,
// the --dist-url spawn would meet at. Nothing is trained, read or started. Each line of the input
// is one argument after `dptrain train`. A usage error or a ConfigError is the expected answer;
// any other exception is a bug, as is anything the sanitizers report (a flag's number that does
// not fit where it goes, say).
//
//   scripts/fuzz train_cli 60

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "command_line.h"
#include "dptrain/common/error.h"
#include "train_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"train"};
  append_lines(data, size, args);
  std::vector<const char*> argv;
  for (const auto& arg : args) argv.push_back(arg.c_str());
  CLI::App app{"dptrain train", "train"};
  dpt::cli::TrainFlags flags;
  dpt::cli::SwitchedFlags switched(flags.options);
  dpt::cli::add_train_flags(app, flags, switched);
  try {
    dpt::cli::parse_command_line(app, static_cast<int>(argv.size()), argv.data());
    dpt::cli::finish_train_flags(app, flags, switched);
    dpt::train::check_options(flags.options);
    if (flags.multiprocessing_distributed) dpt::cli::spawn_options(flags.options.parallel().dist());
  } catch (const CLI::ParseError&) {
    // a usage error: CLI11 prints it and the command exits with its code
  } catch (const dpt::ConfigError&) {
    // the command prints the message and exits 2
  }
  return 0;  // any other exception ends the run: libFuzzer reports it as a crash
}
