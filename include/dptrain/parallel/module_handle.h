#pragma once
// The module behind a parallel front end's `ModuleType`, which may be a module holder
// (torch::nn::Sequential, a TORCH_MODULE) or a shared_ptr to a module. DistributedDataParallel
// and DataParallel use it to reach the module's parameters, buffers and train()/eval().

#include <memory>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace dpt::detail {

template <typename Impl>
std::shared_ptr<torch::nn::Module> as_module(const torch::nn::ModuleHolder<Impl>& holder) {
  return holder.ptr();
}

template <typename Impl>
std::shared_ptr<torch::nn::Module> as_module(const std::shared_ptr<Impl>& module) {
  return module;
}

}  // namespace dpt::detail
