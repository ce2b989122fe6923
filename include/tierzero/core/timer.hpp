// Wall-clock timing helpers (steady clock) for step timing and benchmarks.
#pragma once

#include <chrono>

namespace tierzero {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Seconds since the process first asked; the shared time base of the memory event timeline.
double monotonic_seconds();

}  // namespace tierzero
