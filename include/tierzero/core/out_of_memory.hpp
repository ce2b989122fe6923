// OutOfMemory: the Error for memory a budget or the device refused, apart from the others so that
// a caller that can ask for less (bench train's largest micro-batch) catches it alone, while
// every other Error stays fatal to it. Its own header: what throws or catches it includes it.
#pragma once

#include "tierzero/core/error.hpp"

namespace tierzero {

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace tierzero

#define TZ_THROW_OUT_OF_MEMORY(what, hint) \
  throw ::tierzero::OutOfMemory((what), ::tierzero::error_location(__FILE__, __LINE__), (hint))
