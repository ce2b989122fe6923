// Host waits per thread (host_waits.hpp).
#include "tierzero/device/host_waits.hpp"

namespace tierzero {

namespace {
thread_local size_t waits = 0;
}  // namespace

size_t host_waits_on_this_thread() {
  return waits;
}

void count_host_wait() {
  ++waits;
}

}  // namespace tierzero
