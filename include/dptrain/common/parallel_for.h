#pragma once
// Independent pieces of work spread over a few threads, for what runs once and in bulk: writing a
// set's shards, reading a set's indexes (a remote set's are as many round trips as shards).
//
//   dpt::parallel_for(shards.size(), 16, [&](size_t s) { indexes[s] = read_index(shards[s]); });

#include <cstddef>
#include <functional>

namespace dpt {

// Runs body(0) .. body(count - 1) on up to `threads` threads (this one among them), each index
// once. The first exception stops the others after their current index and is rethrown here.
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body);

}  // namespace dpt
