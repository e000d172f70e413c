#pragma once
// Catches SIGINT, SIGTERM, SIGHUP and SIGUSR1 for its lifetime and turns them into bytes on a pipe that a
// poll() loop can watch (the self-pipe trick: a handler may do almost nothing else safely).
// The previous handlers come back when it is destroyed. One at a time per process.

#include <csignal>

namespace dpt::launch {

class SignalCapture {
 public:
  SignalCapture();
  ~SignalCapture();
  SignalCapture(const SignalCapture&) = delete;
  SignalCapture& operator=(const SignalCapture&) = delete;

  // Readable when a signal has arrived.
  int fd() const { return pipe_[0]; }
  // The next caught signal, or 0 when none is pending. Never blocks.
  int take();

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction previous_[4];
};

}  // namespace dpt::launch
