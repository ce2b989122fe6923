// Element types (fp32, bf16, fp16) and their conversions.
// Conversions from fp32 round to nearest, ties to even, and keep NaN a NaN, because every
// mixed-precision path is later compared with the fp32 reference and must not drift by rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tierzero {

enum class DType : uint8_t { f32, bf16, f16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws Error on an unknown name

// Raw 16-bit storage types; arithmetic happens in fp32.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);

inline bf16 to_bf16(float f) {
  return bf16{float_to_bf16_bits(f)};
}
inline f16 to_f16(float f) {
  return f16{float_to_f16_bits(f)};
}
inline float to_float(bf16 v) {
  return bf16_bits_to_float(v.bits);
}
inline float to_float(f16 v) {
  return f16_bits_to_float(v.bits);
}

// Bulk conversions between fp32 and a 16-bit type (or a plain copy for fp32).
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);

}  // namespace tierzero
