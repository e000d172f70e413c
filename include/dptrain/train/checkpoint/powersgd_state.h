#pragma once
// PowerSGD's state in a checkpoint, which rank 0 alone writes: what every rank shares (the step
// count, the random seeds' position, Q) once, and each rank's own error feedback beside it,
// so that a resume at the same world size continues exactly.
//
//   cp.comm_hook = dpt::train::gather_powersgd_state(*state, comm);   // every rank calls it
//   dpt::train::load_powersgd_state(*state, cp.comm_hook, comm.rank(), comm.size());

#include <ATen/core/Dict.h>

#include "dptrain/dist/communicator.h"
#include "dptrain/parallel/powersgd.h"

namespace dpt::train {

// Collective. On rank 0: state_dict() with each rank's "error.<bucket>" as "error.<bucket>.<rank>";
// an empty dict on the other ranks.
c10::impl::GenericDict gather_powersgd_state(const PowerSGDState& state, dist::Communicator& comm);

// Loads rank `rank`'s part of a gathered state. Saved by another number of ranks, the errors belong
// to ranks of that world: each rank then starts without one (returns false), the rest is loaded.
// CheckpointError (or ConfigError from the state) for entries that are not what the gather wrote.
bool load_powersgd_state(PowerSGDState& state, const c10::impl::GenericDict& gathered, int rank, int world);

}  // namespace dpt::train
