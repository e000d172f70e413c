#pragma once
// The parallel layer: the gradient reducer and the data-parallel front ends built on it.
//
//   #include "dptrain/parallel.h"
//   dpt::DistributedDataParallel ddp(model, dpt::dist::init_process_group());

#include "dptrain/parallel/comm_hook_options.h"
#include "dptrain/parallel/comm_hooks.h"
#include "dptrain/parallel/convert_sync_batchnorm.h"
#include "dptrain/parallel/data_parallel.h"
#include "dptrain/parallel/ddp.h"
#include "dptrain/parallel/join.h"
#include "dptrain/parallel/hvd.h"
#include "dptrain/parallel/powersgd.h"
#include "dptrain/parallel/ps.h"
#include "dptrain/parallel/reducer.h"
#include "dptrain/parallel/replicas.h"
#include "dptrain/parallel/sync_batch_norm.h"
#include "dptrain/parallel/zero.h"
#include "dptrain/parallel/zero_stage2.h"
