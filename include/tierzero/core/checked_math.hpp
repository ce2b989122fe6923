// Size arithmetic on numbers that come from input files: every product and sum that sizes a
// buffer or a file range is checked, so a forged header (a billion layers, a shape of 2^40 x 2^40)
// becomes an Error naming what overflowed instead of a wrapped size and a wild allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tierzero {

// a * b and a + b, or false when the result does not fit.
inline bool mul_fits(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool add_fits(size_t a, size_t b, size_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// The same, throwing Error("<what> overflows ...") when the result does not fit.
size_t checked_mul(size_t a, size_t b, const std::string& what);
size_t checked_add(size_t a, size_t b, const std::string& what);

}  // namespace tierzero
