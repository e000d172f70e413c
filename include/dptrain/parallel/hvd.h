#pragma once
// The Horovod API (horovod.torch) on dptrain. DistributedOptimizer reduces gradients through the
// same Reducer as DistributedDataParallel: Horovod's tensor fusion is the reducer's buckets.
//
//   dpt::hvd::init();                          // under dptrain launch / torchrun, srun or mpirun
//   auto model = dpt::models::resnet20();
//   auto sgd = std::make_shared<torch::optim::SGD>(
//       model->parameters(), torch::optim::SGDOptions(0.05 * dpt::hvd::size()).momentum(0.9));
//   dpt::hvd::broadcast_parameters(dpt::models::state_dict(*model), /*root_rank=*/0);
//   dpt::hvd::broadcast_optimizer_state(*sgd, /*root_rank=*/0);
//   dpt::hvd::DistributedOptimizer optimizer(
//       sgd, model->named_parameters(),
//       dpt::hvd::DistributedOptimizerOptions().compression(dpt::hvd::Compression::Fp16));
//   optimizer.zero_grad();
//   loss.backward();                           // gradients reduced during backward
//   optimizer.step();
//   auto accuracy = dpt::hvd::allreduce(local_accuracy, "val_accuracy");   // the mean over ranks
//
// The free functions act on the process's Context, which init() creates and shutdown() drops.
// Code that runs several ranks in one process (the tests) builds one Context per rank and calls
// the same operations on it.
//
// Named collectives first check, in one extra exchange, that every rank passed the same name,
// dtype and shape (allgather: all but the first dimension). A mismatch throws the same
// ConfigError on every rank, naming the tensor and the ranks, instead of hanging or crashing.
//
// hvd/context.h: the Context and its collectives; hvd/broadcast_state.h: root's model and
// optimizer to every rank; hvd/process.h: the process's Context and the free functions;
// hvd/optimizer.h: DistributedOptimizer.

#include "dptrain/parallel/hvd/broadcast_state.h"
#include "dptrain/parallel/hvd/context.h"
#include "dptrain/parallel/hvd/optimizer.h"
#include "dptrain/parallel/hvd/process.h"
