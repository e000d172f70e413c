#pragma once
// A short-lived helper program run to its end within a bound: a Slurm requeue, a credential
// process. It is started without a shell (argv[0] looked up in PATH), inherits this process's
// environment and standard error, and is killed (SIGKILL) at the bound, so that a tool that
// hangs holds nothing up for longer than that.
//
//   const dpt::CommandOutcome ran = dpt::run_bounded({"scontrol", "requeue", id}, std::chrono::seconds(60));
//   if (!ran.succeeded()) log << ran.describe("scontrol requeue") << std::endl;

#include <chrono>
#include <string>
#include <vector>

namespace dpt {

struct CommandOutcome {
  int spawn_error = 0;     // the errno of a program that could not be started (ENOENT: not in PATH)
  bool timed_out = false;  // killed at the bound
  int status = 0;          // waitpid's status, once it ended by itself
  std::string output;      // its standard output, when asked for; else it goes to ours
  std::chrono::milliseconds bound{0};  // what it was given

  bool succeeded() const;
  // What went wrong, with `what` naming the program: "could not run X (No such file or
  // directory)", "X did not finish within 60 s", "X exited with status 2", "X was killed by
  // signal 9"; empty when it succeeded.
  std::string describe(const std::string& what) const;
};

// Runs `argv` (at least the program) to its end or `bound`, whichever comes first. With
// `capture_output` its standard output is collected in `output` rather than passed on.
CommandOutcome run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds bound,
                           bool capture_output = false);

}  // namespace dpt
