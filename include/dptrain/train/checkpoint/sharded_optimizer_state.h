#pragma once
// A ZeroRedundancyOptimizer's state in the ordinary layout (optimizer_state.h): the state dict one
// optimizer over every parameter would have, so a sharded run's checkpoint resumes without ZeRO,
// at another world size, or in Python's optimizer.load_state_dict, and a plain run's resumes
// under ZeRO.
//
//   // Every rank: its shard's state goes to rank 0, which numbers it as the whole optimizer does.
//   c10::impl::GenericDict whole = dpt::train::consolidated_optimizer_state_dict(zero, /*to=*/0);
//   // Every rank, from the same dict: only the entries of the parameters it owns are kept.
//   dpt::train::load_optimizer_state_dict(zero, whole);   // (optimizer_state.h) calls this:
//   dpt::train::load_sharded_optimizer_state_dict(zero, whole);

#include <ATen/core/Dict.h>

#include "dptrain/parallel/zero.h"
#include "dptrain/parallel/zero_stage2.h"

namespace dpt::train {

// Collective over the optimizer's communicator: every rank's shard state reaches rank `to` (one
// message from each rank, point to point, so no other rank ever holds more than its own), which
// returns the whole dict; the other ranks return an empty one. Group hyper-parameters are `to`'s.
c10::impl::GenericDict consolidated_optimizer_state_dict(const ZeroRedundancyOptimizer& zero, int to);
// The same for ZeRO-2, whose ranks hold parts of parameters: rank `to` lays each part's state into
// its parameter's (shaped and strided as the parameter).
c10::impl::GenericDict consolidated_optimizer_state_dict(const ZeroStage2Optimizer& zero, int to);

// Local: this rank's optimizer takes the state of the parameters it owns from a whole optimizer's
// dict, and every group its hyper-parameters. CheckpointError as load_optimizer_state_dict.
void load_sharded_optimizer_state_dict(ZeroRedundancyOptimizer& zero, const c10::impl::GenericDict& whole);
void load_sharded_optimizer_state_dict(ZeroStage2Optimizer& zero, const c10::impl::GenericDict& whole);

}  // namespace dpt::train
