#pragma once
// torch::optim::SGD with each parameter's update in one pass over memory:
//
//   auto optimizer = std::make_shared<dpt::optim::FusedSGD>(model->parameters(),
//                                                          torch::optim::SGDOptions(0.1).momentum(0.9));
//
// LibTorch's step makes four passes per parameter (the decayed gradient into a fresh temporary,
// the momentum buffer scaled, then added to, then the parameter updated) and allocates that
// temporary every step: 44 bytes of memory traffic per float parameter, plus page faults for
// the large ones. Here one loop reads the parameter, its gradient and its buffer once and writes
// the parameter and the buffer once (20 bytes). Each element is rounded exactly as LibTorch's
// CPU kernels round it (their vectorised `add` with alpha is a fused multiply-add, `mul` by a
// scalar is not), so the results are bitwise those of torch::optim::SGD and of torch.optim.SGD.
//
// It is an SGD: options, state (momentum buffers), state dicts and checkpoints are SGD's. A
// parameter the loop does not cover (not float32 on the CPU, gradient laid out unlike the
// parameter, a CPU without FMA) takes SGD's own four steps.

#include <torch/optim/sgd.h>

namespace dpt::optim {

class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // The step of mixed precision on a GPU: every parameter is updated unless `found_inf` (one
  // float on the parameters' GPU, 1 when a gradient held inf/NaN) says to skip, which PyTorch's
  // fused kernel reads on the device, so the host never waits for the flag (a loss scaler that
  // reads it stalls the GPU once a step). Not bitwise step()'s: the kernel rounds as
  // torch.optim.SGD(fused=True) does. Returns false, changing nothing, where that kernel cannot
  // take the whole step: a parameter off a GPU, a sparse gradient, one laid out unlike its
  // parameter, a momentum buffer not yet made (the first step), or a LibTorch without the kernel.
  bool step_unless_found_inf(const at::Tensor& found_inf);
};

}  // namespace dpt::optim
