// The element types a CUDA kernel may read or write where a buffer is fp32 or 16-bit (the 16-bit
// linears' results and operands, kernels.hpp): float, or the bits of a bf16 / fp16 value, widened
// and rounded with core/dtype_bits.hpp so that every kernel rounds as the CPU backend does
// (nearest, ties to even). Kernels take them as a template parameter; with_storage_type turns a
// DType into that parameter on the host. Host-callable too, for the host emulation of the kernels.
#pragma once

#include <cstdint>

#include "tierzero/core/dtype_bits.hpp"

namespace tierzero::kernels::cuda_impl {

struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};

TZ_HOST_DEVICE inline float to_f32(float x) {
  return x;
}
TZ_HOST_DEVICE inline float to_f32(Bf16Bits x) {
  return dtype_bits::bf16_to_float(x.bits);
}
TZ_HOST_DEVICE inline float to_f32(F16Bits x) {
  return dtype_bits::f16_to_float(x.bits);
}

// v rounded to T's format.
template <typename T>
TZ_HOST_DEVICE inline T from_f32(float v);
template <>
TZ_HOST_DEVICE inline float from_f32<float>(float v) {
  return v;
}
template <>
TZ_HOST_DEVICE inline Bf16Bits from_f32<Bf16Bits>(float v) {
  return {dtype_bits::float_to_bf16(v)};
}
template <>
TZ_HOST_DEVICE inline F16Bits from_f32<F16Bits>(float v) {
  return {dtype_bits::float_to_f16(v)};
}

}  // namespace tierzero::kernels::cuda_impl
