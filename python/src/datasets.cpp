#include "bindings.h"
#include "dptrain/data/cifar.h"
#include "dptrain/data/image_folder.h"
#include "dptrain/data/shard_set.h"
#include "dptrain/data/synthetic.h"

namespace dpt::python {

std::pair<at::Tensor, int64_t> read_sample(const data::Dataset& dataset, int64_t index, int64_t epoch) {
  at::Tensor sample = at::empty(dataset.sample_shape(), at::kFloat);
  py::gil_scoped_release released;
  const int64_t label = dataset.get(index, epoch, sample.data_ptr<float>());
  return {sample, label};
}

namespace {

// torchvision's `targets`: every sample's label, in order.
template <typename Labelled>
std::vector<int64_t> targets_of(const Labelled& dataset) {
  std::vector<int64_t> targets(dataset.size());
  for (int64_t i = 0; i < dataset.size(); ++i) targets[i] = dataset.label(i);
  return targets;
}

}  // namespace

void bind_datasets(py::module_& module) {
  // Shared holders: a loader keeps its dataset alive after Python drops it.
  py::class_<data::Dataset, std::shared_ptr<data::Dataset>>(module, "Dataset")
      .def("__len__", &data::Dataset::size)
      .def_property_readonly("num_classes", &data::Dataset::num_classes)
      .def_property_readonly("sample_shape", &data::Dataset::sample_shape)
      .def("get", &read_sample, py::arg("index"), py::arg("epoch") = 0,
           "(image tensor, label) of sample `index` as augmented at `epoch`")
      .def(
          "__getitem__",
          [](const data::Dataset& dataset, int64_t index) {
            // Python's negative indices, and IndexError (which ends iteration) past the end.
            const int64_t size = dataset.size();
            if (index < 0) index += size;
            if (index < 0 || index >= size) throw py::index_error("sample index out of range");
            return read_sample(dataset, index, 0);
          },
          py::arg("index"))
      .def("describe", &data::Dataset::describe, py::arg("index"), "where sample `index` comes from")
      .def("will_read", &data::Dataset::will_read, py::arg("epoch"), py::arg("indices"),
           "says that epoch `epoch` will read `indices` in this order (a remote shard set fetches its shards "
           "ahead, across the turn of the epoch before)");

  py::class_<data::ImageFolder, data::Dataset, std::shared_ptr<data::ImageFolder>>(module, "ImageFolder")
      .def(py::init([](const std::string& root, data::Transform transform, const std::string& bad_images) {
             py::gil_scoped_release released;  // the scan of a large tree
             return std::make_shared<data::ImageFolder>(root, std::move(transform),
                                                        data::parse_bad_image_policy(bad_images));
           }),
           py::arg("root"), py::arg("transform"), py::arg("bad_images") = "fail")
      .def_property_readonly("classes", &data::ImageFolder::classes)
      .def_property_readonly("targets", &targets_of<data::ImageFolder>)
      .def_property_readonly("samples",
                             [](const data::ImageFolder& folder) {
                               py::list samples;
                               for (int64_t i = 0; i < folder.size(); ++i) {
                                 samples.append(py::make_tuple(folder.path(i), folder.label(i)));
                               }
                               return samples;
                             })
      .def_property_readonly("warnings", &data::ImageFolder::warnings);

  py::class_<data::ShardSet, data::Dataset, std::shared_ptr<data::ShardSet>>(module, "ShardSet")
      .def(py::init([](const std::string& spec, data::Transform transform, const std::string& bad_images,
                       const std::string& cache_dir, int64_t cache_bytes, int fetch_streams) {
             py::gil_scoped_release released;  // the shards' indexes, or scans of shards without one
             return std::make_shared<data::ShardSet>(
                 spec, std::move(transform), data::parse_bad_image_policy(bad_images),
                 data::ShardCacheOptions(cache_dir).max_bytes(cache_bytes).fetch_streams(fetch_streams));
           }),
           py::arg("spec"), py::arg("transform"), py::arg("bad_images") = "fail", py::arg("cache_dir") = "",
           py::arg("cache_bytes") = data::ShardCacheOptions().max_bytes(),
           py::arg("fetch_streams") = data::ShardCacheOptions().fetch_streams())
      .def_property_readonly("classes", &data::ShardSet::classes)
      .def_property_readonly("targets", &targets_of<data::ShardSet>)
      .def_property_readonly("shard_sizes", &data::ShardSet::shard_sizes)
      .def_property_readonly("shard_paths", &data::ShardSet::shard_paths)
      .def_property_readonly("warnings", &data::ShardSet::warnings);

  py::class_<data::Cifar10, data::Dataset, std::shared_ptr<data::Cifar10>>(module, "Cifar10")
      .def(py::init([](const std::string& root, bool train, data::Transform transform) {
             py::gil_scoped_release released;
             return std::make_shared<data::Cifar10>(root, train, std::move(transform));
           }),
           py::arg("root"), py::arg("train"), py::arg("transform"))
      .def_property_readonly("targets", &targets_of<data::Cifar10>);

  py::class_<data::SyntheticDataset, data::Dataset, std::shared_ptr<data::SyntheticDataset>>(module,
                                                                                             "SyntheticDataset")
      .def(py::init([](int64_t size, int64_t num_classes, int image_size, uint64_t seed, data::Transform transform) {
             return std::make_shared<data::SyntheticDataset>(
                 data::SyntheticOptions().size(size).num_classes(num_classes).image_size(image_size).seed(seed),
                 std::move(transform));
           }),
           py::arg("size"), py::arg("num_classes"), py::arg("image_size"), py::arg("seed"), py::arg("transform"))
      .def(
          "render",
          [](const data::SyntheticDataset& synthetic, int64_t index) {
            const data::Image image = synthetic.render(index);
            return py::bytes(reinterpret_cast<const char*>(image.pixels.data()), image.pixels.size());
          },
          py::arg("index"), "the untransformed RGB bytes (height x width x 3) of sample `index`");
}

}  // namespace dpt::python
