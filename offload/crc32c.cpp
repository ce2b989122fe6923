// CRC32C: a slicing-by-8 table version for any CPU, an SSE4.2 version for x86-64 and, where the
// CPU has AVX-512 with VPCLMULQDQ, a carry-less-multiply folding version (several times faster on
// long buffers), chosen once at run time. All give identical results (checked against the RFC 3720
// test vectors and against each other).
#include "tierzero/offload/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

// Folding with carry-less multiplication, 64 bytes per 512-bit register and four registers in
// flight. A 16-byte lane V = L x^64 + H (L: its first 8 bytes) that lies D bytes before the lane
// it is folded into is replaced by L (x^(8D+64) mod P) + H (x^(8D) mod P), which leaves the CRC
// unchanged. PCLMULQDQ of two bit-reflected operands yields their product times x, and a
// constant kept in the low 32 bits of a 64-bit lane stands for itself times x^32, so the
// constants are x^(8D+31) mod P (for L) and x^(8D-33) mod P (for H). What is left at the end is
// one 16-byte lane congruent to all the data before it; the CRC instruction finishes from there.
namespace {

// x^n mod P as the CRC register holds it (bit 31 is x^0).
uint32_t x_pow_mod(size_t n) {
  uint32_t r = 0x80000000u;
  for (size_t i = 0; i < n; ++i) r = (r >> 1) ^ ((r & 1u) ? kPolynomial : 0u);
  return r;
}

struct FoldConstants {
  uint64_t k[4][2];  // per fold distance 16, 32, 48, 64 bytes: {for L, for H}
  uint64_t k256[2];  // distance 256 bytes (the four registers)
};

FoldConstants make_fold_constants() {
  FoldConstants c{};
  for (size_t i = 0; i < 4; ++i) {
    const size_t d = 16 * (i + 1);
    c.k[i][0] = x_pow_mod(8 * d + 31);
    c.k[i][1] = x_pow_mod(8 * d - 33);
  }
  c.k256[0] = x_pow_mod(8 * 256 + 31);
  c.k256[1] = x_pow_mod(8 * 256 - 33);
  return c;
}

constexpr size_t kFoldMin = 256;  // shorter buffers go to the CRC instruction alone

// (L * kL) ^ (H * kH) ^ next, per 128-bit lane. A function of its own with the folding target,
// not a lambda: a lambda does not inherit its enclosing function's target attribute, so it would
// not compile where -march leaves AVX-512 off.
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul"))) inline __m512i fold_lanes(
    __m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

}  // namespace

__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))) uint32_t crc32c_folding(
    const void* data, size_t bytes, uint32_t crc) {
  if (bytes < kFoldMin) return crc32c_hardware(data, bytes, crc);
  static const FoldConstants fc = make_fold_constants();
  const auto* p = static_cast<const unsigned char*>(data);
  // (Built with set/store/load rather than the broadcast, zero-extend and extract intrinsics,
  // which make GCC 12 warn about their undefined pass-through operands.)
  const auto kl256 = static_cast<long long>(fc.k256[0]);
  const auto kh256 = static_cast<long long>(fc.k256[1]);
  const __m512i k256 = _mm512_set_epi64(kh256, kl256, kh256, kl256, kh256, kl256, kh256, kl256);
  const auto kl64 = static_cast<long long>(fc.k[3][0]);
  const auto kh64 = static_cast<long long>(fc.k[3][1]);
  const __m512i k64 = _mm512_set_epi64(kh64, kl64, kh64, kl64, kh64, kl64, kh64, kl64);
  // The starting register (~crc) enters as if XORed into the first four bytes.
  __m512i x0 = _mm512_xor_si512(
      _mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, static_cast<long long>(~crc)));
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  bytes -= 256;
  for (; bytes >= 256; p += 256, bytes -= 256) {
    x0 = fold_lanes(x0, k256, _mm512_loadu_si512(p));
    x1 = fold_lanes(x1, k256, _mm512_loadu_si512(p + 64));
    x2 = fold_lanes(x2, k256, _mm512_loadu_si512(p + 128));
    x3 = fold_lanes(x3, k256, _mm512_loadu_si512(p + 192));
  }
  x1 = fold_lanes(x0, k64, x1);
  x2 = fold_lanes(x1, k64, x2);
  x3 = fold_lanes(x2, k64, x3);
  for (; bytes >= 64; p += 64, bytes -= 64) x3 = fold_lanes(x3, k64, _mm512_loadu_si512(p));
  // Four lanes to one: lane j lies 16 * (3 - j) bytes before lane 3.
  alignas(64) unsigned char lanes[64];  // (4 lanes, 16 bytes)
  _mm512_store_si512(lanes, x3);
  __m128i acc = _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 48));
  for (size_t j = 0; j < 3; ++j) {
    const uint64_t* k = fc.k[2 - j];  // distance 48, 32, 16 bytes
    const __m128i kv = _mm_set_epi64x(static_cast<long long>(k[1]), static_cast<long long>(k[0]));
    const __m128i lane = _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 16 * j));
    acc = _mm_xor_si128(acc, _mm_xor_si128(_mm_clmulepi64_si128(lane, kv, 0x00),
                                           _mm_clmulepi64_si128(lane, kv, 0x11)));
  }
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(acc)));
  c = _mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(acc, 1)));
  return crc32c_hardware(p, bytes, ~static_cast<uint32_t>(c));  // the last 0-63 bytes
}

bool crc32c_folding_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
         __builtin_cpu_supports("sse4.2");
}
#else
uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t crc) {
  return crc32c_portable(data, bytes, crc);
}
bool crc32c_hardware_available() {
  return false;
}
uint32_t crc32c_folding(const void* data, size_t bytes, uint32_t crc) {
  return crc32c_portable(data, bytes, crc);
}
bool crc32c_folding_available() {
  return false;
}
#endif

uint32_t crc32c_builtin(const void* data, size_t bytes, uint32_t crc) {
  static const int path = crc32c_folding_available() ? 2 : crc32c_hardware_available() ? 1 : 0;
  if (path == 2) return crc32c_folding(data, bytes, crc);
  return path == 1 ? crc32c_hardware(data, bytes, crc) : crc32c_portable(data, bytes, crc);
}

// ISA-L where the build has it: `tierzero bench crc` measured it at least as fast as ours
// (docs/benchmarks.md); ours stays the reference it is tested against.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  static const bool isal = crc32c_isal_available();
  return isal ? crc32c_isal(data, bytes, crc) : crc32c_builtin(data, bytes, crc);
}

}  // namespace tierzero::offload
