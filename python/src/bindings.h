#pragma once
// The module dptrain._C, one file per part of the data layer it binds. The Python package around
// it (python/dptrain) gives these the signatures of torchvision and torch.utils.data.
//
// Every call that decodes, transforms or waits for a batch releases the GIL, so that a training
// loop's other Python threads, and the loader's own workers, never wait on it.

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "dptrain/data/dataset.h"

namespace dpt::python {

namespace py = pybind11;

// dptrain.Error (RuntimeError), ConfigError (ValueError) and DataError (OSError), carrying the
// C++ message.
void bind_errors(py::module_& module);
// Transform: the fused train and eval pipelines, their options by keyword.
void bind_transforms(py::module_& module);
// Dataset and ImageFolder, Cifar10, SyntheticDataset.
void bind_datasets(py::module_& module);
// DistributedSampler and EvalSampler.
void bind_samplers(py::module_& module);
// Loader: batches of a dataset's samples in a given order, built by threads.
void bind_loader(py::module_& module);

// A new tensor holding sample `index` of `dataset` at `epoch`, and its label (GIL released).
std::pair<at::Tensor, int64_t> read_sample(const data::Dataset& dataset, int64_t index, int64_t epoch);

}  // namespace dpt::python
