// fp32 <-> bf16/fp16 conversion with round-to-nearest-even, done on bit patterns (dtype_bits.hpp,
// shared with the CUDA kernels) so the result does not depend on the compiler's or the CPU's
// rounding mode.
#include "tierzero/core/dtype.hpp"

#include <cstring>

#include "tierzero/core/dtype_bits.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16") return DType::f16;
  TZ_THROW("unknown dtype '" + name + "'", "use fp32, bf16 or fp16");
}

uint16_t float_to_bf16_bits(float f) {
  return dtype_bits::float_to_bf16(f);
}

float bf16_bits_to_float(uint16_t b) {
  return dtype_bits::bf16_to_float(b);
}

uint16_t float_to_f16_bits(float f) {
  return dtype_bits::float_to_f16(f);
}

float f16_bits_to_float(uint16_t h) {
  return dtype_bits::f16_to_float(h);
}

void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
  switch (dst_type) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(src[i]);
      return;
    }
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_f16_bits(src[i]);
      return;
    }
  }
}

void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) {
  switch (src_type) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(s[i]);
      return;
    }
    case DType::f16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_bits_to_float(s[i]);
      return;
    }
  }
}

}  // namespace tierzero
