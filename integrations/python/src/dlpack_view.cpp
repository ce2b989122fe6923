// Float32HostView (dlpack_view.hpp): consumes a "dltensor" capsule as the DLPack protocol asks
// (renamed "used_dltensor", the producer's deleter called once the view is done).
#include "dlpack_view.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero::python {
namespace {

constexpr int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;
constexpr uint8_t kDLFloat = 2;

bool compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

}  // namespace

Float32HostView::Float32HostView(const pybind11::capsule& capsule, const std::string& what) {
  TZ_CHECK(std::string(capsule.name() ? capsule.name() : "") == "dltensor",
           what + " is not an unused DLPack capsule",
           "pass torch.utils.dlpack.to_dlpack(tensor) or tensor.__dlpack__()");
  managed_ = capsule.get_pointer<DLManagedTensor>();
  TZ_CHECK(PyCapsule_SetName(capsule.ptr(), "used_dltensor") == 0,
           "cannot mark the DLPack capsule of " + what + " as used", "");
  try {
    check_and_map(what);
  } catch (...) {
    if (managed_->deleter) managed_->deleter(managed_);
    throw;
  }
}

void Float32HostView::check_and_map(const std::string& what) {
  const DLTensor& t = managed_->dl_tensor;
  TZ_CHECK(t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost,
           what + " is in " + (t.device.device_type == kDLCUDA ? "CUDA" : "non-host") +
               " memory (DLPack device type " + std::to_string(t.device.device_type) + ")",
           "copy it to the CPU first (the Python wrapper does this for CUDA tensors)");
  TZ_CHECK(t.dtype.code == kDLFloat && t.dtype.bits == 32 && t.dtype.lanes == 1,
           what + " is not float32 (DLPack type code " + std::to_string(t.dtype.code) + ", " +
               std::to_string(t.dtype.bits) + " bits)",
           "convert it with .float() first");
  TZ_CHECK(compact(t), what + " is not contiguous", "pass tensor.contiguous()");
  numel_ = 1;
  for (int32_t d = 0; d < t.ndim; ++d) numel_ *= static_cast<size_t>(t.shape[d]);
  data_ = reinterpret_cast<float*>(static_cast<char*>(t.data) + t.byte_offset);
}

Float32HostView::Float32HostView(Float32HostView&& other) noexcept
    : managed_(other.managed_), data_(other.data_), numel_(other.numel_) {
  other.managed_ = nullptr;
}

Float32HostView::~Float32HostView() {
  if (managed_ && managed_->deleter) managed_->deleter(managed_);
}

}  // namespace tierzero::python
