#pragma once
// The arithmetic of a shared-memory allreduce's step 2: a rank combines its part of a chunk from
// every rank's values, in rank order, blockwise so that each input is read once and each output
// written once.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dptrain/dist/collective.h"

namespace dpt::dist::transport::shm {
namespace reduce_detail {

// Elements per block: a block's partial results stay in the L1 cache between the passes over it.
constexpr int64_t kBlockElements = 2048;

// out[i] = combine(a[i], b[i]); then out[i] = combine(out[i], c[i]) for a third rank and on.
template <typename T, typename Combine>
void combine_pair(T* __restrict out, const T* __restrict a, const T* __restrict b, int64_t count, Combine combine) {
  for (int64_t i = 0; i < count; ++i) out[i] = combine(a[i], b[i]);
}

template <typename T, typename Combine>
void combine_into(T* __restrict out, const T* __restrict b, int64_t count, Combine combine) {
  for (int64_t i = 0; i < count; ++i) out[i] = combine(out[i], b[i]);
}

// out[i] = also[i] = finish(out[i]).
template <typename T, typename Finish>
void finish_into(T* __restrict out, T* __restrict also, int64_t count, Finish finish) {
  for (int64_t i = 0; i < count; ++i) out[i] = also[i] = finish(out[i]);
}

// out = also = finish(combine over inputs, in rank order), elementwise.
template <typename T, typename Combine, typename Finish>
void reduce_blocks(T* out, T* also, const std::vector<const char*>& inputs, int64_t count, Combine combine,
                   Finish finish) {
  auto input = [&](size_t k, int64_t begin) { return reinterpret_cast<const T*>(inputs[k]) + begin; };
  for (int64_t begin = 0; begin < count; begin += kBlockElements) {
    const int64_t n = std::min(kBlockElements, count - begin);
    combine_pair(out + begin, input(0, begin), input(1, begin), n, combine);
    for (size_t k = 2; k < inputs.size(); ++k) combine_into(out + begin, input(k, begin), n, combine);
    finish_into(out + begin, also + begin, n, finish);
  }
}

}  // namespace reduce_detail

// out = also = op over `inputs` (one per rank, at least two, `count` elements of T each),
// elementwise, in rank order. `out` overlaps no input; `also` may be one of the inputs (this rank's
// own values), which the last pass over a block overwrites after every input has been read. A
// mean is the sum divided by the number of ranks, as Gloo's sum followed by a division gives it.
template <typename T>
void reduce_parts(char* out, char* also, const std::vector<const char*>& inputs, int64_t count, ReduceOp op) {
  using reduce_detail::reduce_blocks;
  T* typed = reinterpret_cast<T*>(out);
  T* typed_also = reinterpret_cast<T*>(also);
  const auto as_is = [](T value) { return value; };
  const auto sum = [](T a, T b) { return a + b; };
  switch (op) {
    case ReduceOp::Max:
      return reduce_blocks(typed, typed_also, inputs, count, [](T a, T b) { return a < b ? b : a; }, as_is);
    case ReduceOp::Min:
      return reduce_blocks(typed, typed_also, inputs, count, [](T a, T b) { return b < a ? b : a; }, as_is);
    case ReduceOp::Sum:
      return reduce_blocks(typed, typed_also, inputs, count, sum, as_is);
    case ReduceOp::Mean: {
      const T ranks = static_cast<T>(inputs.size());
      return reduce_blocks(typed, typed_also, inputs, count, sum, [ranks](T value) { return value / ranks; });
    }
  }
}

}  // namespace dpt::dist::transport::shm
