#pragma once
// Making every rank start from root's model and optimizer (Horovod's broadcast_parameters and
// broadcast_optimizer_state), over a Context.

#include <torch/optim/optimizer.h>

#include "dptrain/parallel/hvd/context.h"

namespace dpt::hvd {

// Copies `root_rank`'s values into every rank's tensors, in place: model->named_parameters() or a
// state dict (parameters and buffers). Every rank must pass the same names and shapes.
void broadcast_parameters(const Context& context, const NamedTensors& tensors, int root_rank);

// Makes every rank's optimizer state and hyper-parameters (learning rate, momentum, ...) those of
// `root_rank`, whatever the optimizer. Ranks whose state is still empty (no step yet) get root's
// state; when root's is empty, every rank's becomes empty.
void broadcast_optimizer_state(const Context& context, torch::optim::Optimizer& optimizer, int root_rank);

}  // namespace dpt::hvd
