// check_16bit_types: the argument rule of the 16-bit ops (kernels.hpp: the 16-bit linears and
// norms), one place for both backends so that a caller's mistake reads the same on the CPU and on
// a GPU.
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

}  // namespace tierzero::kernels
