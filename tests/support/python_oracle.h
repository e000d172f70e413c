#pragma once
// Runs a Python snippet under the oracle Python (the build's DPTRAIN_PYTHON: /usr/bin/python3,
// which has torch and torchvision, or a GPU machine's own) and returns what it printed, for unit
// tests whose expected values come from PyTorch itself.
//
//   auto out = dpt::testing::run_python("import torch; print(torch.randperm(4).tolist())");
//   if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torch"));

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
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

// The oracle Python's side: it imports torch and torchvision once, then reads scripts (a line with
// the length, then the text) and runs each in a child forked from that state, so that every script
// starts as it would in a Python of its own (no state left by the one before) without paying the
// import again: about 2.5 CPU seconds per script, some twenty times per run of the suite. It
// replies with a line "<status> <length>" and the script's stdout and stderr, merged.
inline constexpr const char* kOracleServer = R"PY(
import os, sys, traceback
try:
    import torch, torchvision
    # A forked child starts with one intra-op thread (torch's fork handler); a Python of its own
    # would have this many.
    threads = torch.get_num_threads()
    missing = False
except ImportError:
    missing = True
requests, replies = sys.stdin.buffer, sys.stdout.buffer
while True:
    header = requests.readline()
    if not header:
        break
    script = requests.read(int(header)).decode()
    if missing:
        replies.write(b"missing 0\n")
        replies.flush()
        continue
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        code = 0
        try:
            torch.set_num_threads(threads)
            exec(compile(script, "<oracle script>", "exec"),
                 {"__name__": "__main__", "sys": sys, "torch": torch, "torchvision": torchvision})
        except SystemExit as exit:
            # As Python itself ends: sys.exit("why") prints why and exits 1.
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as child_output:
        output = child_output.read()
    _, status = os.waitpid(pid, 0)
    replies.write(b"%d %d\n" % (os.waitstatus_to_exitcode(status), len(output)) + output)
    replies.flush()
)PY";

// The one oracle Python of this test process, started at its first script. Its pipes are
// close-on-exec, so that programs the tests start do not hold them open; when this process ends,
// the server reads the end of its input and exits.
class OracleServer {
 public:
  static OracleServer& instance() {
    static OracleServer server;
    return server;
  }

  // The script's exit status and output; nullopt when the oracle Python is missing or lacks torch
  // or torchvision.
  std::optional<std::pair<int, std::string>> run(const std::string& script) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ < 0) return std::nullopt;
    const std::string request = std::to_string(script.size()) + "\n" + script;
    if (!write_all(request)) return std::nullopt;  // the Python could not start
    std::string header;
    char c;
    while (read_all(&c, 1) && c != '\n') header += c;
    std::istringstream fields(header);
    std::string status;
    size_t length = 0;
    if (!(fields >> status >> length)) return std::nullopt;  // no such Python: it wrote nothing
    if (status == "missing") return std::nullopt;
    std::string output(length, '\0');
    if (!read_all(output.data(), length)) throw std::runtime_error("the oracle Python ended mid-reply");
    return std::make_pair(std::stoi(status), output);
  }

  ~OracleServer() {
    if (pid_ < 0) return;
    close(to_server_);
    close(from_server_);
    waitpid(pid_, nullptr, 0);
  }

 private:
  OracleServer() {
    int requests[2], replies[2];
    if (pipe2(requests, O_CLOEXEC) != 0) throw std::runtime_error("cannot make the pipes to the Python oracle");
    if (pipe2(replies, O_CLOEXEC) != 0) {
      close(requests[0]);
      close(requests[1]);
      throw std::runtime_error("cannot make the pipes to the Python oracle");
    }
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(requests[0], 0);
      dup2(replies[1], 1);
      execl(DPTRAIN_ORACLE_PYTHON, DPTRAIN_ORACLE_PYTHON, "-c", kOracleServer, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(requests[0]);
    close(replies[1]);
    if (pid < 0) {
      close(requests[1]);
      close(replies[0]);
      throw std::runtime_error("cannot start the Python oracle");
    }
    pid_ = pid;
    to_server_ = requests[1];
    from_server_ = replies[0];
  }

  bool write_all(const std::string& data) {
    // A Python that never started has closed its end: fail the write instead of dying of SIGPIPE.
    sigset_t pipe_signal, previous;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(to_server_, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    // Discard the SIGPIPE a failed write raised, then restore the mask.
    const timespec no_wait{0, 0};
    while (sigtimedwait(&pipe_signal, nullptr, &no_wait) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return done == data.size();
  }

  bool read_all(char* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = read(from_server_, data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  std::mutex mutex_;
  pid_t pid_ = -1;
  int to_server_ = -1;
  int from_server_ = -1;
};

// stdout of the script, or nullopt when the oracle Python is missing or lacks torch or torchvision
// (the test then calls DPT_MISSING_DEPENDENCY). A script that fails for any other reason throws,
// so the test fails.
inline std::optional<std::string> run_python(const std::string& script) {
  auto result = OracleServer::instance().run(script);
  if (!result) return std::nullopt;
  if (result->first != 0) throw std::runtime_error("Python oracle script failed:\n" + result->second);
  return std::move(result->second);
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
