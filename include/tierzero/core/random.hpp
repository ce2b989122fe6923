// A small deterministic RNG (xoshiro256**, seeded by splitmix64) with uniform and normal draws.
// Defined here rather than taken from <random> so that a seed gives the same model and the same
// data on every compiler and standard library.
#pragma once

#include <cmath>
#include <cstdint>

namespace tierzero {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
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
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  double normal() {  // Box-Muller; one draw per call keeps the stream simple to reason about
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Counter-based draws: the value at (key, index) depends on nothing else, so any range of a
// tensor can be drawn alone, in any order, on any rank, and equals the same range of a draw of the
// whole tensor. Initialisation uses them so that each rank creates only its own shards.
inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser: a bijection with good avalanche
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// The key of one stream (a seed and a tensor's identity).
inline uint64_t stream_key(uint64_t seed, uint64_t id) {
  return mix64(seed ^ mix64(id + 0x9e3779b97f4a7c15ull));
}
// Element `index` of a standard normal stream: Box-Muller over the pair (index / 2), its cosine
// for even indices and its sine for odd ones, so every draw is an exact N(0, 1) sample.
inline double counter_normal(uint64_t key, uint64_t index) {
  const uint64_t pair = index >> 1;
  const uint64_t a = mix64(key + (2 * pair + 1) * 0x9e3779b97f4a7c15ull);
  const uint64_t b = mix64(key + (2 * pair + 2) * 0x9e3779b97f4a7c15ull);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;          // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  return (index & 1) != 0 ? r * std::sin(theta) : r * std::cos(theta);
}

}  // namespace tierzero
