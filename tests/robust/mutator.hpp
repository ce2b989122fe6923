// A seeded mutator for the readers' fuzz tests: byte flips, truncations, insertions, int32 header
// field substitutions with huge, negative and boundary values, and JSON value substitutions
// (wrong types, fractions, negatives, 1e400, huge integers) at random places of a document.
// Every case is reproducible from (seed, reader, case index).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace tierzero::test {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // One random byte-level change; `what` receives a description.
  std::string mutate_bytes(const std::string& in, std::string& what);
  // Overwrites int32 number `field` of a little-endian header with a hostile value.
  std::string set_header_field(const std::string& in, size_t field, std::string& what);
  // A hostile int32 (0, -1, 1e9, INT32_MAX, ...).
  int32_t hostile_int32();
  // A hostile JSON value (wrong type, fraction, negative, huge).
  nlohmann::json hostile_json();
  // One value of `doc` (any depth, objects and arrays included) replaced by a hostile one, or a
  // key removed or renamed.
  void mutate_json(nlohmann::json& doc, std::string& what);
  // One number token of JSON text replaced by a hostile literal (1e400, -1, 0.5, 2^64, ...),
  // or a structural character damaged.
  std::string mutate_json_text(const std::string& text, std::string& what);

 private:
  std::mt19937_64 rng_;
};

}  // namespace tierzero::test
