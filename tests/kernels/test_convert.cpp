// The working-parameter conversions of every backend (Kernels::convert_from_f32 / convert_to_f32)
// against core's bit-pattern functions, bit for bit: every 16-bit pattern widened, and fp32
// inputs that cover each rounding case (ties, subnormal results, overflow to inf, NaN payloads)
// narrowed. The CPU and CUDA stores round the same master to the same working bits only if
// these agree exactly.
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/dtype_bits.hpp"

namespace tierzero::test {
namespace {

class ConvertTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(ConvertTest);

using dtype_bits::bits_float;
using dtype_bits::float_bits;

// fp32 values around every rounding boundary of both 16-bit types, plus random ones.
std::vector<float> narrowing_inputs() {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          65504.0f,  // fp16 max
                          65519.0f,  // rounds down to fp16 max
                          65520.0f,  // rounds to fp16 inf
                          6.1e-5f,   // near fp16's smallest normal
                          5.96e-8f,  // fp16's smallest subnormal
                          2.98e-8f,  // half of it: a tie to zero
                          3.0e-8f,   // just above the tie
                          bits_float(0x7fc00001u),
                          bits_float(0xffa00000u),  // signalling NaN, negative
                          bits_float(0x7f800001u)};
  // Ties and neighbours for bf16 (16 dropped bits) and fp16 (13 dropped bits) at several scales.
  for (uint32_t e : {0x3f800000u, 0x47000000u, 0x38800000u, 0x33800000u, 0x00400000u}) {
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x18000u, 0x1000u, 0x0fffu, 0x1001u, 0x3000u}) {
      x.push_back(bits_float(e | low));
      x.push_back(-bits_float(e | low));
    }
  }
  for (float scale : {1e-6f, 1e-2f, 1.0f, 1e3f, 6e4f, 1e30f}) {
    const std::vector<float> r = random_normal(5000, static_cast<uint32_t>(scale * 7 + 3), scale);
    x.insert(x.end(), r.begin(), r.end());
  }
  return x;
}

TEST_P(ConvertTest, WideningEvery16BitPatternMatchesCore) {
  for (DType type : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> patterns(65536);  // (65536) every bit pattern
    for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<uint16_t>(i);
    auto d_in = to_device(patterns);
    auto d_out = empty<float>(patterns.size());  // (65536) fp32
    kernels().convert_to_f32(d_out->get(), d_in->get(), type, patterns.size());
    device().default_stream().synchronize();
    const std::vector<float> got = d_out->download();
    std::vector<float> want(patterns.size());  // (65536) core's answer
    convert_to_f32(want.data(), patterns.data(), type, patterns.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (float_bits(got[i]) != float_bits(want[i])) {
        if (mismatches == 0)
          ADD_FAILURE() << dtype_name(type) << " pattern 0x" << std::hex << i << ": got 0x"
                        << float_bits(got[i]) << " want 0x" << float_bits(want[i]);
        ++mismatches;
      }
    }
    std::printf("%s convert_to_f32 %s: %zu of 65536 patterns differ from core\n",
                GetParam().c_str(), dtype_name(type), mismatches);
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST_P(ConvertTest, NarrowingRoundsLikeCore) {
  const std::vector<float> x = narrowing_inputs();  // (n) fp32
  auto d_in = to_device(x);
  for (DType type : {DType::bf16, DType::f16, DType::f32}) {
    const size_t eb = dtype_size(type);
    auto d_out = empty<uint16_t>(x.size() * eb / 2);  // (n) type
    kernels().convert_from_f32(d_out->get(), type, d_in->get(), x.size());
    device().default_stream().synchronize();
    const std::vector<uint16_t> got = d_out->download();
    std::vector<uint16_t> want(x.size() * eb / 2);  // (n) type, core's answer
    convert_from_f32(want.data(), type, x.data(), x.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        if (mismatches == 0)
          ADD_FAILURE() << dtype_name(type) << " half-word " << i << ": got 0x" << std::hex
                        << got[i] << " want 0x" << want[i];
        ++mismatches;
      }
    }
    std::printf("%s convert_from_f32 %s: %zu of %zu values differ from core\n", GetParam().c_str(),
                dtype_name(type), mismatches, x.size());
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST_P(ConvertTest, ZeroElementsTouchNothing) {
  auto d = empty<float>(1);
  d->upload({42.0f});
  kernels().convert_to_f32(d->get(), nullptr, DType::bf16, 0);
  kernels().convert_from_f32(nullptr, DType::f16, d->get(), 0);
  device().default_stream().synchronize();
  EXPECT_EQ(d->download()[0], 42.0f);
}

}  // namespace
}  // namespace tierzero::test
