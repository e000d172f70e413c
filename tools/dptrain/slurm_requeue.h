#pragma once
// `dptrain train --requeue`: after the ranks stopped on request (Slurm's --signal, scancel, a
// preemption) and rank 0 wrote the checkpoint, put the job back in Slurm's queue with
// `scontrol requeue`, so that its next start continues with --resume auto. Lightning and submitit
// do the same on SIGUSR1. The job must be requeueable (`sbatch --requeue`).

#include <chrono>
#include <ostream>
#include <string>

namespace dpt::cli {

// Runs `scontrol requeue JOB_ID`, waiting at most `bound`; says on `log` what it does (first: the
// requeue usually ends this process) and what failed, and returns whether scontrol succeeded.
bool requeue_slurm_job(const std::string& job_id, std::chrono::seconds bound, std::ostream& log);

}  // namespace dpt::cli
