// error_of: the message of the Error a call throws, "" when it throws none — what the tests of
// clear errors compare their expected wording against.
#pragma once

#include <functional>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tierzero::testing
