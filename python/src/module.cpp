#include "bindings.h"

PYBIND11_MODULE(_C, module) {
  module.doc() = "dptrain's datasets, fused transforms, sampler and threaded loader (see the dptrain package)";
  dpt::python::bind_errors(module);
  dpt::python::bind_transforms(module);
  dpt::python::bind_datasets(module);
  dpt::python::bind_samplers(module);
  dpt::python::bind_loader(module);
}
