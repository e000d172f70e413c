#include "dptrain/compat/pickle.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "little_endian.h"
#include "zip_directory.h"

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

// Bytes in memory, read only where they are: a read past the end copies what there is and says
// how much, as a file would.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    const size_t available = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, available);
    return available;
  }

 private:
  const std::vector<char>& bytes_;
};

// How many bytes of argument each pickle opcode has before the next opcode: a fixed count, the
// size of a little-endian length that prefixes the argument, or lines ended by '\n'.
struct OpcodeArgument {
  enum class Kind { kFixed, kLengthPrefixed, kLines } kind = Kind::kFixed;
  int bytes = 0;  // kFixed: the argument; kLengthPrefixed: the length; kLines: how many lines
};

std::optional<OpcodeArgument> argument_of(uint8_t opcode) {
  using Kind = OpcodeArgument::Kind;
  switch (opcode) {
    // MARK STOP POP POP_MARK DUP NONE REDUCE APPEND BUILD DICT EMPTY_DICT APPENDS LIST EMPTY_LIST
    // OBJ SETITEM TUPLE EMPTY_TUPLE SETITEMS BINPERSID, then protocols 2-5's.
    case '(': case '.': case '0': case '1': case '2': case 'N': case 'R': case 'a': case 'b': case 'd':
    case '}': case 'e': case 'l': case ']': case 'o': case 's': case 't': case ')': case 'u': case 'Q':
    case 0x81: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8f: case 0x90: case 0x91:
    case 0x92: case 0x93: case 0x94: case 0x97: case 0x98:
      return OpcodeArgument{Kind::kFixed, 0};
    case 0x80: case 'K': case 'q': case 'h': case 0x82:  // PROTO BININT1 BINPUT BINGET EXT1
      return OpcodeArgument{Kind::kFixed, 1};
    case 'M': case 0x83:  // BININT2 EXT2
      return OpcodeArgument{Kind::kFixed, 2};
    case 'J': case 'r': case 'j': case 0x84:  // BININT LONG_BINPUT LONG_BINGET EXT4
      return OpcodeArgument{Kind::kFixed, 4};
    case 'G': case 0x95:  // BINFLOAT FRAME
      return OpcodeArgument{Kind::kFixed, 8};
    case 0x8a: case 'U': case 0x8c: case 'C':  // LONG1 SHORT_BINSTRING SHORT_BINUNICODE SHORT_BINBYTES
      return OpcodeArgument{Kind::kLengthPrefixed, 1};
    case 0x8b: case 'T': case 'X': case 'B':  // LONG4 BINSTRING BINUNICODE BINBYTES
      return OpcodeArgument{Kind::kLengthPrefixed, 4};
    case 0x8d: case 0x8e: case 0x96:  // BINUNICODE8 BINBYTES8 BYTEARRAY8
      return OpcodeArgument{Kind::kLengthPrefixed, 8};
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'p': case 'g': case 'P':  // protocol 0's
      return OpcodeArgument{Kind::kLines, 1};
    case 'c': case 'i':  // GLOBAL INST: module, then name
      return OpcodeArgument{Kind::kLines, 2};
    default:
      return std::nullopt;
  }
}

// Walks the pickle's opcodes up to STOP and refuses one whose argument runs past the end, or that
// names a memo slot no pickle of this size has. LibTorch's unpickler allocates what a length
// claims before reading it: a 1 KB checkpoint claiming a 4 GB string made it allocate and clear
// 4 GB (7 s) before it found the bytes missing.
void check_pickle_framing(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (true) {
    TORCH_CHECK(at < size, "the pickle ends before its STOP opcode");
    const uint8_t opcode = data[at++];
    if (opcode == '.') return;
    const std::optional<OpcodeArgument> argument = argument_of(opcode);
    TORCH_CHECK(argument, "the pickle has an unknown opcode 0x", std::hex, int{opcode}, " at byte ", std::dec, at - 1);
    uint64_t length = static_cast<uint64_t>(argument->bytes);
    if (argument->kind == OpcodeArgument::Kind::kLengthPrefixed) {
      TORCH_CHECK(size - at >= length, "the pickle ends inside a length at byte ", at);
      const uint64_t claimed = little_endian(data + at, argument->bytes);
      at += length;
      length = claimed;
    } else if (argument->kind == OpcodeArgument::Kind::kLines) {
      for (int line = 0; line < argument->bytes; ++line) {
        const void* newline = std::memchr(data + at, '\n', size - at);
        TORCH_CHECK(newline, "the pickle ends inside a text argument at byte ", at);
        at = static_cast<size_t>(static_cast<const uint8_t*>(newline) - data) + 1;
      }
      length = 0;
    }
    TORCH_CHECK(length <= size - at, "the pickle's opcode 0x", std::hex, int{opcode}, std::dec, " at byte ", at,
                " claims ", length, " bytes, and ", size - at, " are left");
    if (opcode == 'r') {
      // LONG_BINPUT: LibTorch's memo is a vector grown up to the slot named, so slot 1.6 billion
      // made it allocate 25 GB. Picklers number their slots in order, one per PUT (two bytes or
      // more each), so a slot past the pickle's size is no pickle's.
      const uint64_t slot = little_endian(data + at, 4);
      TORCH_CHECK(slot < size, "the pickle's LONG_BINPUT at byte ", at - 1, " names memo slot ", slot,
                  ", more than a pickle of ", size, " bytes can have filled");
    }
    at += static_cast<size_t>(length);
  }
}

}  // namespace

c10::IValue pickle_load(const std::vector<char>& bytes) {
  check_zip_entry_sizes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(bytes));
  const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  check_pickle_framing(static_cast<const uint8_t*>(pickle.get()), pickle_size);
  // As torch::pickle_load: the pickle in data.pkl, the tensors' storages under data/.
  return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                           /*type_resolver=*/c10::nullopt, /*obj_loader=*/c10::nullopt,
                                           /*device=*/c10::nullopt, reader);
}

void pickle_save(const c10::IValue& value, const ByteSink& sink) {
  std::vector<char> pickled;  // data.pkl: the structure, small; the tensors' bytes are not in it
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(untyped(value));
  pickler.stop();

  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    sink(static_cast<const char*>(data), size);
    return size;
  });
  // The archive layout torch.save uses: data.pkl, the tensors' storages under data/, a version.
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

std::vector<char> pickle_save(const c10::IValue& value) {
  std::vector<char> archive;
  pickle_save(value, [&](const char* bytes, size_t size) { archive.insert(archive.end(), bytes, bytes + size); });
  return archive;
}

c10::impl::GenericDict string_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

}  // namespace dpt::compat
