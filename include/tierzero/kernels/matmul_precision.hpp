// MatmulPrecision: the arithmetic Kernels::matmul_forward / matmul_backward use for their
// products. Operands and results stay fp32 in memory whatever the setting; only how the products
// are computed changes. It exists so a backend with tensor cores (CUDA) can run the products
// there without a change to the fp32 interface, while fp32 stays the exact reference.
#pragma once

#include <string>

namespace tierzero::kernels {

enum class MatmulPrecision {
  fp32,  // fp32 multiply-add on every term: the reference (and the default)
  tf32,  // operands rounded to TF32 (10-bit mantissa) on tensor cores, fp32 accumulation
  bf16,  // operands rounded to bf16 (7-bit mantissa) on tensor cores, fp32 accumulation
  fp16,  // operands rounded to fp16 (10-bit mantissa, 5-bit exponent), fp32 accumulation
};

// "fp32", "tf32", "bf16" or "fp16".
const char* matmul_precision_name(MatmulPrecision p);
// The inverse of matmul_precision_name; throws Error naming the accepted values otherwise.
MatmulPrecision matmul_precision_from_name(const std::string& name);

}  // namespace tierzero::kernels
