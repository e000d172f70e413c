#include "dptrain/data/loader.h"

#include "bindings.h"
#include "dptrain/common/error.h"

namespace dpt::python {

namespace {

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw ConfigError(str("loader: images come as float32, bfloat16 or float16, not '", name, "'"));
}

// One epoch's loader. Its workers never touch Python; the GIL is released while it waits for a
// batch and while it stops them (a worker may be finishing a batch).
class EpochLoader {
 public:
  EpochLoader(std::shared_ptr<const data::Dataset> dataset, std::vector<int64_t> indices, int64_t epoch,
              data::LoaderOptions options) {
    py::gil_scoped_release released;
    loader_ = std::make_unique<data::Loader>(std::move(dataset), std::move(indices), epoch, options);
  }
  ~EpochLoader() { close(); }

  std::optional<std::pair<at::Tensor, at::Tensor>> next() {
    DPT_CHECK(loader_, ConfigError, "loader: this epoch's loader was closed");
    std::optional<data::Batch> batch;
    {
      py::gil_scoped_release released;
      batch = loader_->next();
    }
    if (!batch) return std::nullopt;
    return std::make_pair(batch->images, batch->labels);
  }

  void close() {
    if (!loader_) return;
    if (PyGILState_Check()) {
      py::gil_scoped_release released;
      loader_.reset();
    } else {
      loader_.reset();
    }
  }

  const data::Loader& loader() const {
    DPT_CHECK(loader_, ConfigError, "loader: this epoch's loader was closed");
    return *loader_;
  }

 private:
  std::unique_ptr<data::Loader> loader_;
};

}  // namespace

void bind_loader(py::module_& module) {
  py::class_<EpochLoader>(module, "EpochLoader")
      .def(py::init([](std::shared_ptr<const data::Dataset> dataset, std::vector<int64_t> indices, int64_t epoch,
                       int64_t batch_size, int threads, int prefetch_factor, bool drop_last,
                       const std::string& bad_images, bool pin_memory, const std::string& dtype,
                       at::MemoryFormat memory_format) {
             return std::make_unique<EpochLoader>(std::move(dataset), std::move(indices), epoch,
                                                  data::LoaderOptions()
                                                      .batch_size(batch_size)
                                                      .threads(threads)
                                                      .prefetch_factor(prefetch_factor)
                                                      .drop_last(drop_last)
                                                      .bad_image_policy(data::parse_bad_image_policy(bad_images))
                                                      .pin_memory(pin_memory)
                                                      .dtype(parse_dtype(dtype))
                                                      .memory_format(memory_format));
           }),
           py::kw_only(), py::arg("dataset"), py::arg("indices"), py::arg("epoch"), py::arg("batch_size"),
           py::arg("threads"), py::arg("prefetch_factor"), py::arg("drop_last"), py::arg("bad_images"),
           py::arg("pin_memory"), py::arg("dtype"), py::arg("memory_format"))
      .def("next", &EpochLoader::next, "the next (images, labels), or None at the end of the epoch")
      .def("close", &EpochLoader::close, "stops the workers now")
      .def_property_readonly("num_batches", [](const EpochLoader& e) { return e.loader().num_batches(); })
      .def_property_readonly("skipped", [](const EpochLoader& e) {
        py::list skipped;
        for (const auto& sample : e.loader().skipped()) skipped.append(py::make_tuple(sample.index, sample.what));
        return skipped;
      });
}

}  // namespace dpt::python
