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

// CPU seconds the whole process (every thread) has run; -1 where the clock cannot be read. Other
// processes on a shared machine stretch a computation's wall time but not this.
double process_cpu_seconds();

}  // namespace tierzero
