#include "dptrain/common/error.h"

#include "bindings.h"

namespace dpt::python {

void bind_errors(py::module_& module) {
  // pybind11 tries the translators last registered first, so the base comes first. Each error
  // keeps the C++ message, which names the file, the option or the sample.
  py::register_exception<Error>(module, "Error", PyExc_RuntimeError);
  py::register_exception<ConfigError>(module, "ConfigError", PyExc_ValueError);
  py::register_exception<DataError>(module, "DataError", PyExc_OSError);
}

}  // namespace dpt::python
