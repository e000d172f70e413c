#include "dptrain/data/sampler.h"

#include "bindings.h"

namespace dpt::python {

void bind_samplers(py::module_& module) {
  py::class_<data::DistributedSampler>(module, "DistributedSampler")
      .def(py::init([](int64_t dataset_size, int64_t world_size, int64_t rank, bool shuffle, uint64_t seed,
                       bool drop_last, std::vector<int64_t> shard_sizes, int64_t open_shards) {
             return data::DistributedSampler(dataset_size, data::SamplerOptions(world_size, rank)
                                                               .shuffle(shuffle)
                                                               .seed(seed)
                                                               .drop_last(drop_last)
                                                               .shard_sizes(std::move(shard_sizes))
                                                               .open_shards(open_shards));
           }),
           py::kw_only(), py::arg("dataset_size"), py::arg("world_size"), py::arg("rank"), py::arg("shuffle"),
           py::arg("seed"), py::arg("drop_last"), py::arg("shard_sizes") = std::vector<int64_t>{},
           py::arg("open_shards") = 8)
      .def("set_epoch", &data::DistributedSampler::set_epoch, py::arg("epoch"))
      .def_property_readonly("epoch", &data::DistributedSampler::epoch)
      .def("indices", &data::DistributedSampler::indices, "this rank's indices for the current epoch")
      .def(
          "indices_for",
          [](data::DistributedSampler sampler, int64_t epoch) {
            sampler.set_epoch(epoch);
            return sampler.indices();
          },
          py::arg("epoch"), "this rank's indices for epoch `epoch`, the sampler's own epoch left as it is")
      .def_property_readonly("num_samples", &data::DistributedSampler::num_samples)
      .def_property_readonly("total_size", &data::DistributedSampler::total_size);

  py::class_<data::EvalSampler>(module, "EvalSampler")
      .def(py::init<int64_t, int64_t, int64_t>(), py::kw_only(), py::arg("dataset_size"), py::arg("world_size"),
           py::arg("rank"))
      .def("indices", &data::EvalSampler::indices)
      .def_property_readonly("num_samples", &data::EvalSampler::num_samples);
}

}  // namespace dpt::python
