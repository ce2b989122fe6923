// CRC32C (Castagnoli), the checksum every swap extent carries so that a flipped bit on disk is
// an error instead of silent corruption. ISA-L's crc32_iscsi computes it where the build found
// ISA-L (libisal-dev; `tierzero bench crc` measured it at least as fast as ours); otherwise
// TierZero's own kernels: carry-less-multiply folding (AVX-512 VPCLMULQDQ) or the SSE4.2
// instruction when the CPU has it (checked at run time), a table-driven version elsewhere. The
// table version is the reference every other one is tested against.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierzero::offload {

// CRC32C of `bytes` bytes at `data`, continuing from `crc` (0 for a fresh checksum), so that
// crc32c(b, crc32c(a)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// The implementations, exposed for tests and benchmarks; crc32c() picks once per process.
// TierZero's own fastest kernel for this CPU (what crc32c() uses without ISA-L).
uint32_t crc32c_builtin(const void* data, size_t bytes, uint32_t crc = 0);
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t crc = 0);  // needs SSE4.2
bool crc32c_hardware_available();
// Needs AVX-512 (F, VL), VPCLMULQDQ, PCLMUL and SSE4.2.
uint32_t crc32c_folding(const void* data, size_t bytes, uint32_t crc = 0);
bool crc32c_folding_available();
// ISA-L's crc32_iscsi (libisal-dev) where the build found it, else the table version.
uint32_t crc32c_isal(const void* data, size_t bytes, uint32_t crc = 0);
bool crc32c_isal_available();

}  // namespace tierzero::offload
