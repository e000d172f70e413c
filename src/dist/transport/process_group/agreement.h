#pragma once
// Before a collective goes to Gloo: do all ranks mean the same one? Private to the transports.
//
// Gloo pairs the ranks' operations by order alone. A rank that skipped a collective silently sums
// its next one with the others' current one, and ranks whose tensors differ in size abort the
// process from inside Gloo's event loop ("op.preamble.length <= op.nbytes"), where no caller can
// catch it. So each rank first gathers every rank's flight-recorder identity of the collective
// ("#57 all_reduce(sum) bucket 3 [2785354] Float step 12") in a small fixed-size all_gather and
// compares them: a skipped collective shows as a different step or operation, a shape as a
// different shape, and every rank fails at once with the same list. Steps are compared when every
// rank has one (a rank that joined, dpt::Join, has none). Horovod negotiates every
// tensor the same way; PyTorch does with TORCH_DISTRIBUTED_DEBUG=DETAIL.
//
// One round trip per collective, paid on the calling thread. The shared-memory all_reduce compares
// its own labels instead (transport/shm/allreduce.h), and NCCL's operations are not checked: their
// tensors live on the GPU and a check would synchronise with it.

#include <chrono>

#include "dptrain/compat/compat.h"
#include "dptrain/dist/abandonment.h"
#include "dptrain/dist/flight_recorder.h"

namespace dpt::dist::detail {

// Throws DistError naming each rank's collective when they differ; TimeoutError or the backend's
// own error when the exchange fails (the caller classifies it as it would the collective's);
// GroupAbandoned once `abandonment` (when given) is abandoned.
void check_agreement(compat::Backend& backend, const CollectiveRecord& record, std::chrono::milliseconds timeout,
                     const Abandonment* abandonment = nullptr);

// Whether collectives on `backend` are checked: Gloo's only. NCCL's tensors are on the GPU, and
// reading the answer would synchronise with it.
bool can_check_agreement(const compat::Backend& backend);

// What a disagreement means and where to look, for this check's message and the shared-memory one.
extern const char* const kDisagreementAdvice;

}  // namespace dpt::dist::detail
