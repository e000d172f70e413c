#include "dptrain/launch/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "dptrain/common/error.h"
#include "dptrain/common/text.h"
#include "dptrain/launch/signal_capture.h"
#include "dptrain/launch/worker_output.h"

namespace dpt::launch {

using Clock = std::chrono::steady_clock;

struct WorkerGroup::Worker {
  pid_t pid = -1;
  bool running = false;
  int fds[2] = {-1, -1};  // read ends of its stdout and stderr pipes
  std::unique_ptr<WorkerOutput> output;
  Clock::time_point started;
};

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

bool is_executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// argv[0] as execve needs it: a path, searched in the worker's PATH when it has no slash.
std::string resolve_program(const WorkerSpec& spec) {
  const std::string& program = spec.argv.at(0);
  if (program.find('/') != std::string::npos) {
    DPT_CHECK(is_executable(program), ConfigError, "cannot run '", program, "' for ", spec.name,
              ": it is not an executable file");
    return program;
  }
  auto path_it = spec.env.find("PATH");
  std::string path = path_it != spec.env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw ConfigError(str("cannot run '", program, "' for ", spec.name, ": not found in PATH (", path, ")"));
}

std::string describe_status(int exit_code, int signal) {
  if (signal != 0) return str("was killed by signal ", signal, " (", strsignal(signal), ")");
  return str("exited with code ", exit_code);
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// A library's informational log record, which says nothing of why a worker failed: Gloo's
// "[file:line] INFO ..." (newer Gloo logs every connection so) and glog's or c10's "I1129 ...".
bool is_info_record(const std::string& line) {
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string::npos) return true;
  if (line[start] == '[') {
    const size_t close = line.find(']', start);
    if (close != std::string::npos && line.compare(close + 1, 6, " INFO ") == 0) return true;
  }
  const size_t glog = line[start] == '[' ? start + 1 : start;
  return line.size() > glog + 5 && line[glog] == 'I' &&
         std::all_of(line.begin() + static_cast<std::ptrdiff_t>(glog) + 1,
                     line.begin() + static_cast<std::ptrdiff_t>(glog) + 5, [](char c) { return c >= '0' && c <= '9'; });
}

// The line of `tail` that says why: the last that names an error (the first line of a multi-line
// message, as dptrain's, or Python's final "RuntimeError: ..."), else the last line that is not an
// informational log record; empty when there is none.
std::string cause_of(const std::vector<std::string>& tail) {
  constexpr size_t kLongest = 300;
  auto says_error = [](const std::string& line) {
    const std::string lower = ascii_lower(line);
    return lower.find("error") != std::string::npos || lower.find("what():") != std::string::npos;
  };
  auto found = std::find_if(tail.rbegin(), tail.rend(), says_error);
  if (found == tail.rend()) found = std::find_if_not(tail.rbegin(), tail.rend(), is_info_record);
  if (found == tail.rend()) return "";
  std::string line = *found;
  line.erase(0, line.find_first_not_of(' '));
  return line.size() > kLongest ? line.substr(0, kLongest) + "..." : line;
}

}  // namespace

std::string GroupResult::report() const {
  if (outcome == Outcome::Succeeded) return "all workers succeeded";
  if (outcome == Outcome::Interrupted) {
    return str("interrupted by signal ", signal, " (", strsignal(signal),
               "); it was passed to every worker and all of them have stopped");
  }
  if (outcome == Outcome::Stopped) return "the workers were stopped on the launcher's request";
  const WorkerExit& w = *first_failure;
  std::string text = str(w.name, " (pid ", w.pid, ") failed first: it ", describe_status(w.exit_code, w.signal),
                         " after ", static_cast<int>(w.seconds * 10) / 10.0,
                         " s; the other workers were stopped.");
  if (w.tail.empty()) return text + " It printed nothing.";
  text += str(" Its last ", w.tail.size(), " line(s):");
  for (const auto& line : w.tail) text += "\n    " + line;
  return text;
}

std::string GroupResult::summary() const {
  if (outcome != Outcome::WorkerFailed) return report();
  const WorkerExit& w = *first_failure;
  std::string text = str(w.name, " ", describe_status(w.exit_code, w.signal));
  const std::string cause = cause_of(w.tail);
  return cause.empty() ? text : text + ": " + cause;
}

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> specs, SupervisorOptions options)
    : specs_(std::move(specs)), options_(options) {}

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (w.running) {
      kill(-w.pid, SIGKILL);
      waitpid(w.pid, nullptr, 0);
    }
    close_fd(w.fds[0]);
    close_fd(w.fds[1]);
  }
}

bool WorkerGroup::any_running() const {
  for (const auto& w : workers_) {
    if (w.running) return true;
  }
  return false;
}

void WorkerGroup::start_all() {
  // Everything the children need is prepared before the first fork: between fork and exec a
  // child of a multi-threaded process may only make async-signal-safe calls.
  for (const auto& spec : specs_) programs_.push_back(resolve_program(spec));
  workers_.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) start(i, "w");
}

void WorkerGroup::start(size_t index, const char* log_mode) {
  const WorkerSpec& spec = specs_[index];
  Worker& worker = workers_[index];
  const pid_t launcher = getpid();
  const int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  DPT_ASSERT(dev_null >= 0, "cannot open /dev/null: ", std::strerror(errno));
  std::shared_ptr<std::FILE> log;
  if (!spec.log_path.empty()) {
    log.reset(std::fopen(spec.log_path.c_str(), log_mode), std::fclose);
    DPT_CHECK(log != nullptr, ConfigError, "cannot write the log file '", spec.log_path, "' for ", spec.name, ": ",
              std::strerror(errno));
  }
  worker.output = std::make_unique<WorkerOutput>("[" + spec.name + "] ", log, options_.tail_lines());

  std::vector<std::string> env_strings;
  for (const auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  DPT_ASSERT(pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0, "pipe2 failed: ",
             std::strerror(errno));
  const char* program = programs_[index].c_str();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) CPU_SET(cpu, &cpus);
  pid_t pid = fork();
  DPT_ASSERT(pid >= 0, "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Child. Own process group: signals to the worker reach whatever it starts, and the
    // terminal's Ctrl-C reaches only the launcher, which forwards it (one path for all signals).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(127);  // the launcher died before prctl took effect
    signal(SIGPIPE, SIG_DFL);  // a launcher that communicated ignores it; the worker starts as any program
    dup2(dev_null, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    // Pinned before exec, so that every thread the program starts inherits the CPUs. Where the
    // kernel refuses, the worker runs unpinned.
    if (!spec.cpus.empty()) (void)sched_setaffinity(0, sizeof(cpus), &cpus);
    execve(program, argv.data(), envp.data());
    const char* reason = strerror(errno);
    (void)!write(STDERR_FILENO, "exec failed: ", 13);
    (void)!write(STDERR_FILENO, reason, strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before we might signal it
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(dev_null);
  worker.fds[0] = out_pipe[0];
  worker.fds[1] = err_pipe[0];
  for (int fd : worker.fds) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  worker.pid = pid;
  worker.running = true;
  worker.started = Clock::now();
}

// Moves whatever output is waiting into the workers' sinks and reaps exited workers. With
// `block_output`, first waits up to one poll interval for output or exits.
void WorkerGroup::reap_and_drain(bool block_output) {
  std::vector<pollfd> fds;
  for (auto& w : workers_) {
    for (int fd : w.fds) {
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
  }
  if (block_output && !fds.empty()) poll(fds.data(), fds.size(), static_cast<int>(kPollInterval.count()));
  char buffer[65536];
  for (auto& w : workers_) {
    for (int stream = 0; stream < 2; ++stream) {
      while (w.fds[stream] >= 0) {
        ssize_t n = read(w.fds[stream], buffer, sizeof(buffer));
        if (n > 0) {
          w.output->feed(static_cast<WorkerOutput::Stream>(stream), buffer, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close_fd(w.fds[stream]);  // EOF: the worker and everything it started closed it
        } else {
          break;
        }
      }
    }
  }
}

void WorkerGroup::stop_all(int signal, SignalCapture& signals) {
  for (auto& w : workers_) {
    if (!w.running) continue;
    kill(-w.pid, signal);
    // A stopped worker (SIGSTOP, ^Z) would hold the signal until the grace period ends in SIGKILL;
    // continuing it lets it act on the signal now.
    kill(-w.pid, SIGCONT);
  }
  // A second Ctrl-C (or any further signal) during the grace period means: stop now.
  const auto deadline = Clock::now() + options_.grace_period();
  while (any_running() && Clock::now() < deadline && signals.take() == 0) {
    reap_and_drain(true);
    for (auto& w : workers_) {
      if (w.running && waitpid(w.pid, nullptr, WNOHANG) == w.pid) w.running = false;
    }
  }
  for (auto& w : workers_) {
    if (!w.running) continue;
    kill(-w.pid, SIGKILL);
    waitpid(w.pid, nullptr, 0);
    w.running = false;
  }
}

GroupResult WorkerGroup::run() {
  DPT_ASSERT(workers_.empty(), "a WorkerGroup runs once");
  SignalCapture signals;
  start_all();
  GroupResult result;
  bool any_succeeded = false;
  std::optional<Clock::time_point> first_success;
  while (any_running()) {
    if (int signal = signals.take()) {
      result.outcome = GroupResult::Outcome::Interrupted;
      result.signal = signal;
      result.exit_code = 128 + signal;
      stop_all(signal, signals);
      break;
    }
    if (options_.stop_when() && options_.stop_when()()) {
      result.outcome = GroupResult::Outcome::Stopped;
      stop_all(SIGTERM, signals);
      break;
    }
    reap_and_drain(true);
    // The workers that ended since the last look, those a signal killed first: of failures seen
    // at once, a killed worker is the cause and the others' errors (a peer that closed its
    // connection, milliseconds later) its effects, whatever their order in the group.
    std::vector<std::pair<size_t, int>> ended;  // index, wait status
    for (size_t i = 0; i < workers_.size(); ++i) {
      int status = 0;
      if (workers_[i].running && waitpid(workers_[i].pid, &status, WNOHANG) == workers_[i].pid) {
        ended.emplace_back(i, status);
      }
    }
    std::stable_partition(ended.begin(), ended.end(), [](const auto& e) { return WIFSIGNALED(e.second); });
    for (const auto& [index, status] : ended) {
      Worker& w = workers_[index];
      w.running = false;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      any_succeeded = any_succeeded || code == 0;
      if (code == 0 && !first_success) first_success = Clock::now();
      if (code == 0 || (result.first_failure && !options_.keep_survivors())) continue;
      reap_and_drain(false);  // its last words, before the report is cut
      w.output->flush_partial();
      WorkerExit exit;
      exit.name = specs_[index].name;
      exit.index = index;
      exit.pid = w.pid;
      exit.exit_code = code;
      exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      exit.seconds = std::chrono::duration<double>(Clock::now() - w.started).count();
      exit.tail = w.output->tail();
      if (options_.on_lost()) options_.on_lost()(exit);
      if (options_.keep_survivors() && options_.replace() && options_.replace()(specs_[index], exit)) {
        close_fd(w.fds[0]);
        close_fd(w.fds[1]);
        start(index, "a");  // its log goes on after the lost worker's
      }
      if (result.first_failure) continue;
      result.outcome = GroupResult::Outcome::WorkerFailed;
      result.exit_code = code;
      result.first_failure = std::move(exit);
    }
    if (result.first_failure && !options_.keep_survivors()) {
      stop_all(SIGTERM, signals);
      break;
    }
    // Kept survivors finish together: a worker still there a grace period after the first one
    // finished is one the others went on without (stopped, or hung), which would hold the launch.
    if (options_.keep_survivors() && first_success && Clock::now() - *first_success > options_.grace_period()) {
      for (auto& w : workers_) {
        if (w.running && options_.on_lost()) {
          WorkerExit left;
          left.name = specs_[static_cast<size_t>(&w - workers_.data())].name;
          left.pid = w.pid;
          left.left_behind = true;
          options_.on_lost()(left);
        }
      }
      stop_all(SIGTERM, signals);
      break;
    }
  }
  // Kept survivors that finished the job make it a success, whoever was lost on the way.
  if (options_.keep_survivors() && result.outcome == GroupResult::Outcome::WorkerFailed && any_succeeded) {
    result.outcome = GroupResult::Outcome::Succeeded;
    result.exit_code = 0;
  }
  reap_and_drain(false);
  for (auto& w : workers_) {
    w.output->flush_partial();
    close_fd(w.fds[0]);
    close_fd(w.fds[1]);
  }
  return result;
}

}  // namespace dpt::launch
