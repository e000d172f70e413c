#include "slurm_requeue.h"

#include <vector>

#include "dptrain/common/bounded_command.h"

namespace dpt::cli {

bool requeue_slurm_job(const std::string& job_id, std::chrono::seconds bound, std::ostream& log) {
  // Slurm ends this job as soon as the requeue takes effect, often before scontrol returns: say it first.
  log << "requeueing Slurm job " << job_id << " (scontrol requeue); its next start continues from the checkpoint"
      << std::endl;
  const CommandOutcome ran = run_bounded({"scontrol", "requeue", job_id}, bound);
  if (ran.spawn_error != 0 || ran.timed_out) {
    log << "--requeue: " << ran.describe("scontrol requeue " + job_id) << "; requeue job " << job_id
        << " yourself, or resubmit it: --resume auto continues from the checkpoint" << std::endl;
    return false;
  }
  if (!ran.succeeded()) {
    log << "--requeue: scontrol requeue " << job_id << " failed (see its message above; was the job submitted "
        << "with --requeue?); resubmit the job: --resume auto continues from the checkpoint" << std::endl;
    return false;
  }
  return true;
}

}  // namespace dpt::cli
