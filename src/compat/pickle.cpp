#include "dptrain/compat/pickle.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace dpt::compat {

namespace {

// `value` with every list and dict as a generic (List[Any], Dict[K, Any]) container: the pickler
// writes typed lists of ints, floats, bools and tensors through torch.jit._pickle.build_intlist
// and its kin, which Python's weights_only unpickler refuses as well.
c10::IValue untyped(const c10::IValue& value) {
  if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList out(c10::AnyType::get());
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) out.push_back(untyped(list.get(i)));
    return out;
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& entry : dict) out.insert(entry.key(), untyped(entry.value()));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(untyped(element));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

}  // namespace

std::vector<char> pickle_save(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(untyped(value));
  pickler.stop();

  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    archive.insert(archive.end(), bytes, bytes + size);
    return size;
  });
  // The archive layout torch.save uses: data.pkl, the tensors' storages under data/, a version.
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

c10::impl::GenericDict string_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

}  // namespace dpt::compat
