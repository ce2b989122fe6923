// check_16bit_types: the argument rule of the 16-bit ops (kernels.hpp: the 16-bit linears and
// norms), one place for both backends so that a caller's mistake reads the same on the CPU and on
// a GPU.
#include <cstdint>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels {

void check_16bit_types(const char* op, DType type, DType result_type, GradWrite result_write) {
  TZ_CHECK(type == DType::bf16 || type == DType::f16,
           std::string(op) + ": operands of type " + dtype_name(type),
           "the 16-bit ops take bf16 or fp16 operands; fp32 ones go to the fp32 kernels");
  TZ_CHECK(result_type == DType::f32 || result_type == type,
           std::string(op) + ": a result of type " + dtype_name(result_type) + " from " +
               dtype_name(type) + " operands",
           std::string("write the result as fp32 or ") + dtype_name(type));
  TZ_CHECK(result_type == DType::f32 || result_write == GradWrite::overwrite,
           std::string(op) + ": a " + dtype_name(result_type) + " gradient asked to accumulate",
           "only an fp32 gradient accumulates; overwrite a 16-bit one");
}

void check_16bit_gradient_buffer(const char* op, const void* dlogits, const float* logits,
                                 size_t elems) {
  TZ_CHECK(dlogits != nullptr, std::string(op) + ": no buffer for the 16-bit gradient",
           "pass the (N, Vp) 16-bit buffer; for the loss alone call the fp32 forward");
  const auto grad = reinterpret_cast<uintptr_t>(dlogits);
  const auto from = reinterpret_cast<uintptr_t>(logits);
  const bool disjoint =
      elems == 0 || grad + elems * sizeof(uint16_t) <= from || from + elems * sizeof(float) <= grad;
  TZ_CHECK(disjoint, std::string(op) + ": the 16-bit gradient overlaps the fp32 logits",
           "give the gradient a buffer of its own (in place only works at the logits' own type)");
}

}  // namespace tierzero::kernels
