#pragma once
// An SGD optimizer's state in the shape of Python's optimizer.state_dict(), so checkpoints carry
// it the way pytorch/examples' do and Python can load it into torch.optim.SGD:
//
//   {'state': {0: {'momentum_buffer': tensor}, ...},
//    'param_groups': [{'lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'maximize',
//                      'params': [0, 1, ...]}]}
//
//   checkpoint.insert("optimizer", dpt::train::sgd_state_dict(optimizer));
//   dpt::train::load_sgd_state_dict(optimizer, checkpoint.at("optimizer").toGenericDict());
//
// Parameters are numbered across groups in order, as Python numbers them.

#include <ATen/core/Dict.h>
#include <torch/optim/sgd.h>

namespace dpt::train {

// Tensors are copied to the CPU.
c10::impl::GenericDict sgd_state_dict(const torch::optim::SGD& optimizer);

// Restores momentum buffers (onto each parameter's device) and the group hyper-parameters.
// Throws CheckpointError when the groups or parameter counts differ or an entry is missing or
// mistyped, naming it.
void load_sgd_state_dict(torch::optim::SGD& optimizer, const c10::impl::GenericDict& state);

}  // namespace dpt::train
