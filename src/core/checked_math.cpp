// Checked size arithmetic for sizes computed from input.
#include "tierzero/core/checked_math.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero {

size_t checked_mul(size_t a, size_t b, const std::string& what) {
  size_t out = 0;
  if (!mul_fits(a, b, &out))
    TZ_THROW(what + " overflows: " + std::to_string(a) + " x " + std::to_string(b) +
                 " does not fit in 64 bits",
             "the input's sizes are corrupt or forged");
  return out;
}

size_t checked_add(size_t a, size_t b, const std::string& what) {
  size_t out = 0;
  if (!add_fits(a, b, &out))
    TZ_THROW(what + " overflows: " + std::to_string(a) + " + " + std::to_string(b) +
                 " does not fit in 64 bits",
             "the input's sizes are corrupt or forged");
  return out;
}

}  // namespace tierzero
