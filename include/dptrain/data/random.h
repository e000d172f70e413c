#pragma once
// Per-sample randomness that depends only on (seed, epoch, sample index): whichever thread or rank
// loads a sample, on whatever schedule, it draws the same crop and flip.
//
//   dpt::data::SampleRng rng(seed, epoch, index);
//   double area = rng.uniform(0.08, 1.0);
//   int64_t top = rng.integer(0, height - h);   // inclusive bounds

#include <cstdint>

namespace dpt::data {

// SplitMix64 (Steele et al., 2014): the key is hashed into a starting state and every draw hashes
// the next counter value, so streams for different keys are independent and need no shared state.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index)
      : state_(mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index))) {}

  uint64_t next() { return mix(state_ += kGolden); }
  // Uniform in [lo, hi), 53 random bits.
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi] (the modulo bias is below 2^-40 for image-sized ranges).
  int64_t integer(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  static uint64_t mix(uint64_t z) {
    z += kGolden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace dpt::data
