// CRC32C through ISA-L's crc32_iscsi (libisal-dev), which picks its own fastest kernel for the
// CPU at run time. ISA-L's CRC is the raw register (no pre- or post-inversion) and takes an int
// length, so the wrapper inverts around it and feeds it at most 1 GiB per call. Built only where
// CMake found ISA-L (TZ_HAVE_ISAL); elsewhere it reports itself unavailable.
#include "tierzero/offload/crc32c.hpp"

#ifdef TZ_HAVE_ISAL
#include <isa-l/crc.h>
#endif

namespace tierzero::offload {

#ifdef TZ_HAVE_ISAL
uint32_t crc32c_isal(const void* data, size_t bytes, uint32_t crc) {
  constexpr size_t kMaxCall = size_t{1} << 30;  // below INT_MAX, ISA-L's length type
  // ISA-L takes a non-const pointer but only reads.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t raw = ~crc;
  while (bytes > 0) {
    const size_t n = bytes < kMaxCall ? bytes : kMaxCall;
    raw = crc32_iscsi(p, static_cast<int>(n), raw);
    p += n;
    bytes -= n;
  }
  return ~raw;
}
bool crc32c_isal_available() {
  return true;
}
#else
uint32_t crc32c_isal(const void* data, size_t bytes, uint32_t crc) {
  return crc32c_portable(data, bytes, crc);
}
bool crc32c_isal_available() {
  return false;
}
#endif

}  // namespace tierzero::offload
