#include "dptrain/launch/signal_capture.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "dptrain/common/error.h"

namespace dpt::launch {

namespace {

// SIGUSR1 too: Slurm's --signal=USR1@SECONDS announces a preemption with it, and the workers turn
// it into a checkpoint and a stop (dpt::train::StopSignals).
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
constexpr int kCount = sizeof(kSignals) / sizeof(kSignals[0]);

// The write end for the handler. A signal handler can reach nothing but globals; this is the only
// mutable global in dptrain, set and cleared by SignalCapture alone.
volatile sig_atomic_t g_write_fd = -1;

void on_signal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  if (g_write_fd >= 0) (void)!write(g_write_fd, &byte, 1);
  errno = saved;
}

}  // namespace

SignalCapture::SignalCapture() {
  DPT_ASSERT(g_write_fd < 0, "only one SignalCapture may be active");
  DPT_ASSERT(pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2 failed: errno ", errno);
  g_write_fd = pipe_[1];
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

SignalCapture::~SignalCapture() {
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  g_write_fd = -1;
  close(pipe_[0]);
  close(pipe_[1]);
}

int SignalCapture::take() {
  unsigned char byte = 0;
  return read(pipe_[0], &byte, 1) == 1 ? byte : 0;
}

}  // namespace dpt::launch
