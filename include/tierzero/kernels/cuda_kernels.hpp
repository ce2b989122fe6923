// Factory for the CUDA backend of Kernels; only present when TierZero is built with CUDA.
#pragma once

#include <memory>

#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels {

// Kernels on CUDA device `device_index` (cuBLASLt for matmuls). Throws Error without CUDA.
std::unique_ptr<Kernels> make_cuda_kernels(int device_index);

}  // namespace tierzero::kernels
