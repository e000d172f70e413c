#pragma once
// What a job does when one of its ranks dies: the launcher and the trainer must agree, since
// going on without a rank needs both a launcher that leaves the other ranks running and ranks
// that re-form their group (`--on-failure` of `dptrain launch` and of `dptrain train`).

namespace dpt {

enum class OnFailure {
  Restart,   // the launcher stops every rank and starts the group again (--max-restarts, --resume auto)
  Continue,  // the other ranks go on in-process, without the lost one, from the last step completed
};

// Set by a launcher that leaves the other workers running when one fails ("1"): a trainer asked
// to continue checks it, since under any other launcher its survivors would be stopped anyway.
inline constexpr const char* kKeepsSurvivorsVariable = "DPTRAIN_LAUNCHER_KEEPS_SURVIVORS";

// Set ("1") for a worker that a launcher keeping survivors started in place of a lost one
// (--max-restarts): it joins the ranks that went on, and takes its state from them.
inline constexpr const char* kReplacementVariable = "DPTRAIN_REPLACEMENT";

// Set by `dptrain launch --rdzv-backend etcd` for its workers: the etcd cluster's endpoints
// (comma-separated) where the job's store lives, in place of the store node 0's launcher serves.
inline constexpr const char* kEtcdEndpointsVariable = "DPTRAIN_RDZV_ETCD";

}  // namespace dpt
