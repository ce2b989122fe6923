// A read of DLPack capsules (the C ABI of dlpack.h v0.8, which PyTorch's to_dlpack and every
// __dlpack__ produce), so tensors cross into the module without linking their framework: the
// structs below are the ABI's, declared here because the header is not a Debian build dependency.
#pragma once
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tierzero::python {

struct DLDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), ...
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // (ndim)
  int64_t* strides;  // (ndim) in elements; null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// A consumed capsule's fp32 host data, valid while the view lives (the producer's deleter runs
// when it goes). Throws tierzero::Error naming `what` unless the tensor is float32, compact and
// in host memory (CPU or pinned).
class Float32HostView {
 public:
  Float32HostView() = default;  // no tensor (a parameter without a gradient)
  Float32HostView(const pybind11::capsule& capsule, const std::string& what);
  ~Float32HostView();
  Float32HostView(const Float32HostView&) = delete;
  Float32HostView& operator=(const Float32HostView&) = delete;
  Float32HostView(Float32HostView&& other) noexcept;
  Float32HostView& operator=(Float32HostView&&) = delete;

  float* data() const { return data_; }
  size_t numel() const { return numel_; }

 private:
  void check_and_map(const std::string& what);

  DLManagedTensor* managed_ = nullptr;
  float* data_ = nullptr;
  size_t numel_ = 0;
};

}  // namespace tierzero::python
