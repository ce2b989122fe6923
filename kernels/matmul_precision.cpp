// Names of MatmulPrecision values (matmul_precision.hpp), shared by every backend, the config
// reader and the benchmarks' JSON.
#include "tierzero/kernels/matmul_precision.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::kernels {

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::fp32:
      return "fp32";
    case MatmulPrecision::tf32:
      return "tf32";
    case MatmulPrecision::bf16:
      return "bf16";
    case MatmulPrecision::fp16:
      return "fp16";
  }
  return "fp32";
}

MatmulPrecision matmul_precision_from_name(const std::string& name) {
  for (MatmulPrecision p :
       {MatmulPrecision::fp32, MatmulPrecision::tf32, MatmulPrecision::bf16, MatmulPrecision::fp16})
    if (name == matmul_precision_name(p)) return p;
  TZ_THROW("unknown matmul precision '" + name + "'", "use fp32, tf32, bf16 or fp16");
}

}  // namespace tierzero::kernels
