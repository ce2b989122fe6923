// CRC32C (Castagnoli), the checksum every swap extent carries so that a flipped bit on disk is
// an error instead of silent corruption. Carry-less-multiply folding (AVX-512 VPCLMULQDQ) or the
// SSE4.2 instruction is used when the CPU has it (checked at run time); a table-driven version
// gives the same result everywhere else.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierzero::offload {

// CRC32C of `bytes` bytes at `data`, continuing from `crc` (0 for a fresh checksum), so that
// crc32c(b, crc32c(a)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// The implementations, exposed for tests and benchmarks; crc32c() picks the fastest available
// one once per process.
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc = 0);
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t crc = 0);  // needs SSE4.2
bool crc32c_hardware_available();
// Needs AVX-512 (F, VL), VPCLMULQDQ, PCLMUL and SSE4.2.
uint32_t crc32c_folding(const void* data, size_t bytes, uint32_t crc = 0);
bool crc32c_folding_available();

}  // namespace tierzero::offload
