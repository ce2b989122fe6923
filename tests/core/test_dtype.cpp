// dtype conversions: bf16 and fp16 round to nearest even, exhaustively checked against an
// independent reference (exact rounding computed in double / by the CPU's F16C unit).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"

using namespace tierzero;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference bf16 rounding: pick the nearer of the two bf16 neighbours in double; ties to even.
uint16_t bf16_reference(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  double dl = std::fabs(static_cast<double>(bf16_bits_to_float(lo)) - f);
  double dh = std::fabs(static_cast<double>(bf16_bits_to_float(hi)) - f);
  if ((hi & 0x7fffu) == 0x7f80u)  // rounding up reaches inf: compare against 2^128
    dh = std::fabs(std::ldexp(1.0, 128) - std::fabs(static_cast<double>(f)));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) ? hi : lo;
}

}  // namespace

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("fp8"), Error);
}

TEST(DType, Bf16RoundsToNearestEvenOverSampledFloats) {
  size_t checked = 0, mismatches = 0;
  // Every float whose low 16 bits are in a stride that covers ties, near-ties and the rest.
  for (uint64_t hi = 0; hi < 0x10000; hi += 7) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u, 0xc000u}) {
      uint32_t u = static_cast<uint32_t>(hi << 16) | lo;
      float f = from_bits(u);
      uint16_t got = float_to_bf16_bits(f);
      if (std::isnan(f)) {
        EXPECT_TRUE(std::isnan(bf16_bits_to_float(got)));
        continue;
      }
      ++checked;
      if (got != bf16_reference(f)) ++mismatches;
    }
  }
  std::printf("bf16: %zu values checked, %zu mismatches\n", checked, mismatches);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
}

// F16C's conversions, compiled for F16C whatever -march says (the GPU bundle is built with
// TIERZERO_NATIVE=OFF, a generic x86-64 target); the test skips on a CPU without the unit.
__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(DType, Fp16MatchesF16CHardwareOnEveryExponent) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C unit";
  size_t checked = 0, mismatches = 0;
  for (uint64_t u64 = 0; u64 <= 0xffffffffull; u64 += 4099) {  // ~1M floats over all exponents
    uint32_t u = static_cast<uint32_t>(u64);
    float f = from_bits(u);
    uint16_t got = float_to_f16_bits(f);
    uint16_t want = f16c_from_float(f);
    ++checked;
    if (std::isnan(f)) {
      if ((got & 0x7c00u) != 0x7c00u || (got & 0x3ffu) == 0) ++mismatches;
    } else if (got != want) {
      ++mismatches;
    }
  }
  // Every fp16 value converts back exactly and round-trips.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_bits_to_float(static_cast<uint16_t>(h));
    float hw = f16c_to_float(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    EXPECT_EQ(std::memcmp(&f, &hw, 4), 0) << "fp16 bits " << h;
    EXPECT_EQ(float_to_f16_bits(f), h);
    ++checked;
  }
  std::printf("fp16: %zu values checked against F16C, %zu mismatches\n", checked, mismatches);
  EXPECT_EQ(mismatches, 0u);
}

TEST(DType, BulkConversionRoundTrips) {
  std::vector<float> src = {0.0f, -1.5f, 3.140625f, 65504.0f, 1e-8f};
  std::vector<uint16_t> mid(src.size());
  std::vector<float> back(src.size());
  convert_from_f32(mid.data(), DType::bf16, src.data(), src.size());
  convert_to_f32(back.data(), mid.data(), DType::bf16, src.size());
  for (size_t i = 0; i < src.size(); ++i)
    EXPECT_EQ(back[i], bf16_bits_to_float(float_to_bf16_bits(src[i])));
  convert_from_f32(mid.data(), DType::f16, src.data(), src.size());
  convert_to_f32(back.data(), mid.data(), DType::f16, src.size());
  EXPECT_EQ(back[3], 65504.0f);
  EXPECT_EQ(back[2], 3.140625f);
}
