#pragma once
// Text in a c10d store, which holds bytes: the rendezvous, the admission and the elastic rounds
// keep their keys' values as text; the transports exchange what each rank found when setting up.

#include <chrono>
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

// Collective over `size` ranks: each writes its `text` under `name`/<its rank> and, once every one
// has (within `timeout`), reads them all, in rank order.
inline std::vector<std::string> exchange_text(c10d::Store& store, const std::string& name, int rank, int size,
                                              const std::string& text, std::chrono::milliseconds timeout) {
  const auto key = [&name](int r) { return name + "/" + std::to_string(r); };
  write_text(store, key(rank), text);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  store.wait(keys, timeout);
  std::vector<std::string> texts;
  for (const auto& k : keys) texts.push_back(read_text(store, k));
  return texts;
}

// Collective, as exchange_text: each rank says why it cannot go on (empty: it can), and every rank
// gets the first rank's reason, "rank 2: <why>", or empty when all of them can. So that every rank
// takes the same way.
inline std::string first_refusal(c10d::Store& store, const std::string& name, int rank, int size,
                                 const std::string& why_not, std::chrono::milliseconds timeout) {
  const auto answers = exchange_text(store, name, rank, size, why_not.empty() ? "ok" : why_not, timeout);
  for (int r = 0; r < size; ++r) {
    if (answers[r] != "ok") return "rank " + std::to_string(r) + ": " + answers[r];
  }
  return {};
}

}  // namespace dpt::dist
