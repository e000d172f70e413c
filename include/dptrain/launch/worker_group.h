#pragma once
// Starting, watching and tearing down a group of local worker processes: the one code path under
// `dptrain launch` and spawn mode.
//
//   std::vector<dpt::launch::WorkerSpec> specs = ...;   // argv and full environment of each
//   dpt::launch::WorkerGroup group(std::move(specs));
//   dpt::launch::GroupResult result = group.run();
//   if (!result.succeeded()) std::cerr << result.report();
//
// Guarantees: SIGINT, SIGTERM and SIGHUP sent to this process reach every worker; when one worker
// fails the others get SIGTERM and, after the grace period, SIGKILL (unless they are kept); workers die with this process
// even if it is killed outright (PR_SET_PDEATHSIG); each worker leads its own process group, so
// whatever it started is signalled with it. run() returns only after every worker is reaped.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

namespace dpt::launch {

class SignalCapture;
struct WorkerExit;

struct WorkerSpec {
  std::string name;                        // "rank 3": prefix of its output lines and in reports
  std::vector<std::string> argv;           // program and arguments; argv[0] is searched in PATH
  std::map<std::string, std::string> env;  // the complete environment of the process
  std::string log_path;                    // when set, output goes to this file, not the terminal
  std::vector<int> cpus;                   // when set, the CPUs it is pinned to
};

struct SupervisorOptions {
  // Time between SIGTERM and SIGKILL when stopping workers.
  TORCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(5);
  // Lines of each worker's output kept for the failure report.
  TORCH_ARG(size_t, tail_lines) = 20;
  // Asked while the workers run (every poll, about 20 times a second; it should be cheap): true
  // stops them with SIGTERM, which dptrain train takes as a stop on request (a checkpoint, then
  // exit). The elastic launcher stops a round this way for a re-formation.
  TORCH_ARG(std::function<bool()>, stop_when);
  // A worker that fails leaves the others running (--on-failure continue): the group ends when
  // every worker has, and fails only if none succeeded. Each failure is told to `on_lost` as it
  // happens.
  TORCH_ARG(bool, keep_survivors) = false;
  TORCH_ARG(std::function<void(const WorkerExit&)>, on_lost);
  // Under keep_survivors, asked after on_lost for each worker that failed: true starts the worker
  // again in its place, from its spec as this function left it (the launcher marks it a
  // replacement, within its --max-restarts).
  TORCH_ARG(std::function<bool(WorkerSpec& spec, const WorkerExit& lost)>, replace);
};

// How one worker ended.
struct WorkerExit {
  std::string name;
  size_t index = 0;  // its place among the group's specs
  pid_t pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it (exit_code is then 128 + signal)
  double seconds = 0; // after its start
  // Kept survivors (SupervisorOptions::keep_survivors) finished while it still ran: it is stopped.
  bool left_behind = false;
  std::vector<std::string> tail;  // its last output lines
};

struct GroupResult {
  // Stopped: SupervisorOptions::stop_when asked for it.
  enum class Outcome { Succeeded, WorkerFailed, Interrupted, Stopped };
  Outcome outcome = Outcome::Succeeded;
  // What the launcher should exit with: 0, the first failing worker's code, or 128 + signal.
  int exit_code = 0;
  std::optional<WorkerExit> first_failure;  // WorkerFailed only
  int signal = 0;                           // Interrupted only: the signal received

  bool succeeded() const { return outcome == Outcome::Succeeded; }
  // Plain-language account of a failure or interruption: who, how, and the last lines.
  std::string report() const;
  // The same in one line, for the launcher's last word: who and how, and the failed worker's error
  // line (the last of its lines that says "error"), else its last line that is not a library's
  // informational log record (Gloo's "[...] INFO ...", glog's "I1129 ...").
  std::string summary() const;
};

class WorkerGroup {
 public:
  explicit WorkerGroup(std::vector<WorkerSpec> specs, SupervisorOptions options = SupervisorOptions());
  ~WorkerGroup();  // kills and reaps any worker still running
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker and supervises them until all have exited, one has failed (the rest are
  // then stopped), or a signal arrived (forwarded, then the rest are stopped). Throws ConfigError
  // when a program cannot be found, before anything starts.
  GroupResult run();

 private:
  struct Worker;
  void start_all();
  // Starts worker `index` from its spec; its log file opened with `log_mode` ("w", or "a" for a
  // replacement, whose lines follow the lost worker's).
  void start(size_t index, const char* log_mode);
  void stop_all(int signal, SignalCapture& signals);
  void reap_and_drain(bool block_output);
  bool any_running() const;

  std::vector<WorkerSpec> specs_;
  std::vector<std::string> programs_;  // each spec's argv[0], resolved before the first start
  SupervisorOptions options_;
  std::vector<Worker> workers_;
};

}  // namespace dpt::launch
