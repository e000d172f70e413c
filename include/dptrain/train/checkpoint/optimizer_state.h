#pragma once
// An optimizer's state in the shape of Python's optimizer.state_dict(), so checkpoints carry it
// the way pytorch/examples' and torchvision's do and Python can load it into the same
// torch.optim class (SGD, RMSprop or AdamW, the kinds make_optimizer builds):
//
//   {'state': {0: {'momentum_buffer': tensor}, ...},                              SGD
//             {0: {'step': 3, 'square_avg': tensor, 'momentum_buffer': ...}}      RMSprop
//             {0: {'step': tensor(3.), 'exp_avg': tensor, 'exp_avg_sq': ...}}     AdamW
//    'param_groups': [{'lr', 'weight_decay', the kind's own hyper-parameters, 'params': [0, 1, ...]}, ...]}
//
//   checkpoint.insert("optimizer", dpt::train::optimizer_state_dict(optimizer));
//   dpt::train::load_optimizer_state_dict(optimizer, checkpoint.at("optimizer").toGenericDict());
//
// Parameters are numbered across groups in order, as Python numbers them.

#include <ATen/core/Dict.h>
#include <torch/optim/optimizer.h>

namespace dpt::train {

// Tensors are copied to the CPU. Throws Error for an optimizer class other than the three (a
// ShardedOptimizer's is gathered by consolidated_optimizer_state_dict, a collective).
c10::impl::GenericDict optimizer_state_dict(const torch::optim::Optimizer& optimizer);

// Restores the per-parameter state (onto each parameter's device) and the group
// hyper-parameters (a ShardedOptimizer: load_sharded_optimizer_state_dict). Throws CheckpointError
// when the state is another optimizer's (naming both), the groups or parameter counts differ, or an
// entry is missing or mistyped, naming it.
void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::impl::GenericDict& state);

}  // namespace dpt::train
