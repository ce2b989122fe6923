// CRC32C: a slicing-by-8 table version for any CPU and an SSE4.2 version for x86-64, chosen once
// at run time. Both give identical results (checked against the RFC 3720 test vectors).
#include "tierzero/offload/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tierzero::offload {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reversed

// table[k][b]: the CRC of byte b followed by k zero bytes, for slicing-by-8.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

}  // namespace

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t crc) {
  const Tables& t = tables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (bytes >= 8) {
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian byte order, as on every platform we build for
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    p += 8;
    bytes -= 8;
  }
  while (bytes--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return ~c;
}

#if defined(__x86_64__)
namespace {

// Shifting a CRC over n zero bytes is linear over GF(2): a 32x32 bit matrix, applied through four
// byte tables. It lets three independent CRC streams (which hide the instruction's latency) be
// combined into one (after Mark Adler's crc32c.c).
using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, ++mat) {
    if (vec & 1u) sum ^= *mat;
  }
  return sum;
}

void gf2_square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

ShiftTables make_shift_tables(size_t zero_bytes) {
  uint32_t odd[32], even[32];  // operators for odd and even powers of two zero bits
  odd[0] = kPolynomial;
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  gf2_square(even, odd);  // two zero bits
  gf2_square(odd, even);  // four zero bits
  const uint32_t* op = nullptr;
  for (size_t len = zero_bytes;;) {
    gf2_square(even, odd);  // first pass: one zero byte
    len >>= 1;
    if (len == 0) {
      op = even;
      break;
    }
    gf2_square(odd, even);
    len >>= 1;
    if (len == 0) {
      op = odd;
      break;
    }
  }
  ShiftTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 0; k < 4; ++k) t[static_cast<size_t>(k)][b] = gf2_times(op, b << (8 * k));
  }
  return t;
}

uint32_t shift(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^ t[2][(crc >> 16) & 0xFFu] ^ t[3][crc >> 24];
}

constexpr size_t kLong = 8192;  // bytes per stream in the three-stream loops
constexpr size_t kShort = 256;

}  // namespace

__attribute__((target("sse4.2"))) uint32_t crc32c_hardware(const void* data, size_t bytes,
                                                           uint32_t crc) {
  static const ShiftTables long_shift = make_shift_tables(kLong);
  static const ShiftTables short_shift = make_shift_tables(kShort);
  const auto* p = static_cast<const unsigned char*>(data);
  auto load = [](const unsigned char* q) {
    uint64_t v = 0;
    std::memcpy(&v, q, 8);
    return v;
  };
  uint64_t c0 = ~crc;
  for (size_t span : {kLong, kShort}) {
    const ShiftTables& table = span == kLong ? long_shift : short_shift;
    while (bytes >= 3 * span) {
      uint64_t c1 = 0, c2 = 0;
      for (const unsigned char* end = p + span; p < end; p += 8) {
        c0 = _mm_crc32_u64(c0, load(p));
        c1 = _mm_crc32_u64(c1, load(p + span));
        c2 = _mm_crc32_u64(c2, load(p + 2 * span));
      }
      c0 = shift(table, static_cast<uint32_t>(c0)) ^ c1;
      c0 = shift(table, static_cast<uint32_t>(c0)) ^ c2;
      p += 2 * span;
      bytes -= 3 * span;
    }
  }
  for (; bytes >= 8; p += 8, bytes -= 8) c0 = _mm_crc32_u64(c0, load(p));
  auto c32 = static_cast<uint32_t>(c0);
  while (bytes--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool crc32c_hardware_available() {
  return __builtin_cpu_supports("sse4.2");
}
#else
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t crc) {
  return crc32c_portable(data, bytes, crc);
}
bool crc32c_hardware_available() {
  return false;
}
#endif

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  static const bool hardware = crc32c_hardware_available();
  return hardware ? crc32c_hardware(data, bytes, crc) : crc32c_portable(data, bytes, crc);
}

}  // namespace tierzero::offload
