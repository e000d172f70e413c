#pragma once
// A ShardedOptimizer's state (ZeRO-1 or ZeRO-2) in the ordinary layout (optimizer_state.h): the
// state dict one optimizer over every parameter would have, so a sharded run's checkpoint resumes
// without ZeRO, at another world size, or in Python's optimizer.load_state_dict, and a plain run's
// resumes under ZeRO. Both read only the sharded optimizer's table of parts (local_parts()), so
// they know no stage.
//
//   // Every rank: its parts' state goes to rank 0, which lays it out as the whole optimizer's.
//   c10::impl::GenericDict whole = dpt::train::consolidated_optimizer_state_dict(zero, /*to=*/0);
//   // Every rank, from the same dict: only its parts' elements are kept.
//   dpt::train::load_optimizer_state_dict(zero, whole);   // (optimizer_state.h) calls this:
//   dpt::train::load_sharded_optimizer_state_dict(zero, whole);

#include <ATen/core/Dict.h>

#include "dptrain/parallel/sharded_optimizer.h"

namespace dpt::train {

// Collective over the optimizer's communicator: every rank's state reaches rank `to` (one message
// from each rank, point to point, so no other rank ever holds more than its own), which lays each
// part's state into its parameter's (shaped and strided as the parameter) and returns the whole
// dict; the other ranks return an empty one. Group hyper-parameters are `to`'s.
c10::impl::GenericDict consolidated_optimizer_state_dict(const ShardedOptimizer& sharded, int to);

// Local: this rank's optimizer takes its parts' elements of a whole optimizer's state, and every
// group its hyper-parameters. CheckpointError as load_optimizer_state_dict.
void load_sharded_optimizer_state_dict(ShardedOptimizer& sharded, const c10::impl::GenericDict& whole);

}  // namespace dpt::train
