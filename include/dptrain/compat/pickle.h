#pragma once
// Pickling for Python's torch.load, as it is in every version.
//
//   std::vector<char> bytes = dpt::compat::pickle_save(state);   // torch.load(path) reads it
//   dpt::compat::pickle_save(state, [&](const char* b, size_t n) { file.write(b, n); });  // streamed
//
// torch::pickle_save writes the zip that torch.save writes, but wraps every dict and list in a
// call of torch.jit._pickle.restore_type_tag (TorchScript's static types), and typed lists in
// build_intlist and its kin. Python 2.6 made torch.load(weights_only=True) the default, and its
// restricted unpickler refuses those calls, so a user's plain torch.load of a dptrain checkpoint
// fails. This writes the same archive with plain dicts and lists, as Python's torch.save does: they
// come back in C++ as generic containers, which is how dptrain reads them (and files from Python).

#include <cstddef>
#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>

namespace dpt::compat {

// Takes an archive's bytes in order, a piece at a time.
using ByteSink = std::function<void(const char* bytes, size_t size)>;

// Hands the archive to `sink` as it is made: the tensors' bytes go straight from their storages,
// so a checkpoint never exists a second time in memory (for ViT-B/16 with AdamW, 1 GB).
void pickle_save(const c10::IValue& value, const ByteSink& sink);

// The whole archive in memory (messages between ranks, tests).
std::vector<char> pickle_save(const c10::IValue& value);

// torch::pickle_load(bytes), reading the archive through a reader that stays inside `bytes`.
// LibTorch's own (VectorReader) copies whatever range the zip's directory names: a corrupt or
// hostile checkpoint made it read past the buffer (a crash found by fuzz/checkpoint_fuzzer.cpp).
// Here such a read comes up short and LibTorch refuses the archive with a c10::Error; so is a
// pickle whose opcodes claim more bytes than it has, or a zip entry claiming more bytes than the
// archive can hold, before LibTorch allocates what they claim.
c10::IValue pickle_load(const std::vector<char>& bytes);

// An empty dict of string keys and values of any type: what a Python dict (a state dict, a
// checkpoint) is in C++, whether pickle_save writes it or torch.load read it.
c10::impl::GenericDict string_dict();

}  // namespace dpt::compat
