// Device-pointer detection and staging copies for builds without CUDA: every pointer is host
// memory, so nothing is ever staged.
#include "comm_internal.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::comm::comm_detail {

bool is_device_pointer(const void*) {
  return false;
}

void copy_device_to_host(void*, const void*, size_t) {
  TZ_THROW("device-to-host staging asked for in a build without CUDA", "a TierZero bug: report it");
}

void copy_host_to_device(void*, const void*, size_t) {
  TZ_THROW("host-to-device staging asked for in a build without CUDA", "a TierZero bug: report it");
}

}  // namespace tierzero::comm::comm_detail
