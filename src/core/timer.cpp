// The process-wide time base for timelines.
#include "tierzero/core/timer.hpp"

namespace tierzero {

double monotonic_seconds() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tierzero
