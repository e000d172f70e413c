#pragma once
// Exit statuses dptrain's programs give meaning to, beyond 0 (success), 1 (failure) and 2 (bad
// usage or configuration).

namespace dpt {

// Training stopped on request (SIGTERM or SIGUSR1: a preemption, scancel, an eviction) after every
// rank agreed on a step and rank 0 wrote checkpoint.pt there: continue with --resume auto.
// `dptrain launch` does not restart a group whose worker stopped so. sysexits.h's EX_TEMPFAIL.
inline constexpr int kExitStoppedOnRequest = 75;

}  // namespace dpt
