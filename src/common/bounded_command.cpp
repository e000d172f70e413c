#include "dptrain/common/bounded_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "dptrain/common/text.h"

extern char** environ;

namespace dpt {

namespace {

using Clock = std::chrono::steady_clock;

// A pipe's two ends, closed when it goes.
struct Pipe {
  std::array<int, 2> fd{-1, -1};
  Pipe() {
    if (::pipe2(fd.data(), O_CLOEXEC) != 0) fd = {-1, -1};
  }
  ~Pipe() {
    for (int end : fd) {
      if (end >= 0) ::close(end);
    }
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_write_end() {
    ::close(fd[1]);
    fd[1] = -1;
  }
};

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

}  // namespace

bool CommandOutcome::succeeded() const {
  return spawn_error == 0 && !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string CommandOutcome::describe(const std::string& what) const {
  if (spawn_error != 0) return str("could not run ", what, " (", std::strerror(spawn_error), ")");
  if (timed_out) return str(what, " did not finish within ", bound.count() / 1000.0, " s");
  if (WIFSIGNALED(status)) return str(what, " was killed by signal ", WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return str(what, " exited with status ", WEXITSTATUS(status));
  return "";
}

CommandOutcome run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds bound,
                           bool capture_output) {
  CommandOutcome outcome;
  outcome.bound = bound;
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers;
  for (auto& arg : args) arg_pointers.push_back(arg.data());
  arg_pointers.push_back(nullptr);
  Pipe out;
  if (capture_output && out.fd[0] < 0) {
    outcome.spawn_error = errno;
    return outcome;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (capture_output) posix_spawn_file_actions_adddup2(&actions, out.fd[1], STDOUT_FILENO);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, arg_pointers[0], &actions, nullptr, arg_pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    outcome.spawn_error = error;
    return outcome;
  }
  const auto deadline = Clock::now() + bound;
  if (capture_output) {
    out.close_write_end();  // so that the read end sees the end once the program's copy closes
    std::array<char, 4096> chunk{};
    pollfd readable{out.fd[0], POLLIN, 0};
    while (true) {
      const int ready = ::poll(&readable, 1, milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;  // the bound (or a failed poll): the wait below decides
      const ssize_t got = ::read(out.fd[0], chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      outcome.output.append(chunk.data(), static_cast<size_t>(got));
    }
  }
  while (true) {
    const pid_t waited = ::waitpid(pid, &outcome.status, WNOHANG);
    if (waited == pid || (waited < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &outcome.status, 0);
      outcome.timed_out = true;
      break;
    }
    ::usleep(20 * 1000);
  }
  return outcome;
}

}  // namespace dpt
