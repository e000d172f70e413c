#pragma once
// Text in a c10d store, which holds bytes: the rendezvous, the admission and the elastic rounds
// keep their keys' values as text.

#include <string>
#include <vector>

#include "dptrain/compat/compat.h"

namespace dpt::dist {

inline std::string read_text(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

inline void write_text(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace dpt::dist
