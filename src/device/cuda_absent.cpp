// cuda_device_count() and make_cuda_device() for builds without CUDA, so that code choosing a
// device at run time links everywhere: the count is 0 with the reason, and asking for a CUDA
// device is a clear Error rather than a link failure.
#include <memory>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {

namespace {
constexpr const char* kNoCudaReason =
    "TierZero was built without CUDA (no nvcc found at configure time)";
}

int cuda_device_count(std::string* reason) {
  if (reason != nullptr) *reason = kNoCudaReason;
  return 0;
}

std::unique_ptr<Device> make_cuda_device(int index) {
  TZ_THROW("cannot open cuda:" + std::to_string(index) + ": " + kNoCudaReason,
           "install the CUDA toolkit and reconfigure with -DTIERZERO_CUDA=ON, or use --device cpu");
}

}  // namespace tierzero
