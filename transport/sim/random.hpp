// The simulation's only source of randomness: xoshiro256** seeded through splitmix64.
//
// Self-written rather than <random> because std:: distributions differ between standard libraries, and a
// seed that reproduces a failure must reproduce it everywhere. Probabilities and ranges are derived from
// raw 64-bit draws with exact integer/IEEE arithmetic for the same reason.
#pragma once

#include <cstdint>

namespace uroce::sim {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A well-mixed seed for a sub-stream, so that streams of neighbouring ids are unrelated.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t s = seed;
  uint64_t x = splitmix64(s) ^ a;
  x = splitmix64(x) ^ b;
  return splitmix64(x);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) w = splitmix64(seed);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // True with probability p. The top 53 bits make a double in [0, 1) exactly, so the comparison is the
  // same on every platform; and a draw that says "lost" at p keeps saying so at any larger p.
  static bool chance(uint64_t draw, double p) {
    if (!(p > 0)) return false;
    if (p >= 1) return true;
    return double(draw >> 11) * 0x1.0p-53 < p;
  }

  // Uniform in [0, n] (inclusive); the modulo bias is below 2^-40 for any n a simulation uses.
  static uint64_t up_to(uint64_t draw, uint64_t n) { return n == ~uint64_t(0) ? draw : draw % (n + 1); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace uroce::sim
