#include "slurm_requeue.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

extern char** environ;

namespace dpt::cli {

bool requeue_slurm_job(const std::string& job_id, std::chrono::seconds bound, std::ostream& log) {
  std::vector<std::string> args{"scontrol", "requeue", job_id};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Slurm ends this job as soon as the requeue takes effect, often before scontrol returns: say it first.
  log << "requeueing Slurm job " << job_id << " (scontrol requeue); its next start continues from the checkpoint"
      << std::endl;
  pid_t pid = 0;
  if (const int error = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); error != 0) {
    log << "--requeue: could not run scontrol (" << std::strerror(error) << "); requeue job " << job_id
        << " yourself, or resubmit it: --resume auto continues from the checkpoint" << std::endl;
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      log << "--requeue: scontrol requeue " << job_id << " did not finish within " << bound.count()
          << " s; requeue the job yourself, or resubmit it" << std::endl;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    log << "--requeue: scontrol requeue " << job_id << " failed (see its message above; was the job submitted "
        << "with --requeue?); resubmit the job: --resume auto continues from the checkpoint" << std::endl;
    return false;
  }
  return true;
}

}  // namespace dpt::cli
