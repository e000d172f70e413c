#pragma once
// The parameter-server architecture beside ring allreduce: of a job's processes, the last
// PsOptions::servers hold disjoint, balanced shards of the parameters and run SGD on them; the
// others are workers that push gradients during backward and pull the updated weights.
// Synchronous (the same mathematics as DistributedDataParallel), asynchronous (Downpour SGD) and
// bounded-staleness consistency.
//
// ps/options.h: roles, consistency, options; ps/shard_layout.h: how parameters are cut;
// ps/server.h: ParameterServer; ps/client.h: ParameterServerClient (the worker side).

#include "dptrain/parallel/ps/client.h"
#include "dptrain/parallel/ps/options.h"
#include "dptrain/parallel/ps/server.h"
#include "dptrain/parallel/ps/shard_layout.h"
