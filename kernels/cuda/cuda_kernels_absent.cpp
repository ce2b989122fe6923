// make_cuda_kernels() for builds without CUDA: the symbol still exists, so code and tests that
// pick a backend at run time link everywhere and get a clear Error instead of a link failure.
// Compiled into tz_kernels only when TZ_HAVE_CUDA is off (see kernels/CMakeLists.txt).
#include <memory>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cuda_kernels.hpp"

namespace tierzero::kernels {

std::unique_ptr<Kernels> make_cuda_kernels(int device_index) {
  TZ_THROW("cannot create CUDA kernels for device " + std::to_string(device_index) +
               ": TierZero was built without CUDA (no nvcc found at configure time)",
           "install the CUDA toolkit and reconfigure with -DTIERZERO_CUDA=ON");
}

}  // namespace tierzero::kernels
