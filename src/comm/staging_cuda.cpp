// Device-pointer detection and staging copies for CUDA builds: the MPI backend asks whether a
// buffer is device memory and, when MPI cannot read it, copies it through host scratch.
#include <cuda_runtime_api.h>

#include <mutex>

#include "comm_internal.hpp"
#include "tierzero/core/cuda_check.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::comm::comm_detail {

namespace {
// Without a GPU every CUDA query fails; ask cudaPointerGetAttributes only where one exists.
bool have_gpu() {
  static std::once_flag once;
  static bool have = false;
  std::call_once(once, [] { have = cuda_device_count() > 0; });
  return have;
}
}  // namespace

bool is_device_pointer(const void* ptr) {
  if (ptr == nullptr || !have_gpu()) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // plain malloc'ed memory on old runtimes: host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}

void copy_device_to_host(void* host, const void* device, size_t bytes) {
  TZ_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDefault));
}

void copy_host_to_device(void* device, const void* host, size_t bytes) {
  TZ_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyDefault));
  // From pageable memory cudaMemcpy may return once the bytes are in the driver's staging buffer,
  // before the DMA lands; kernels on non-blocking streams could then read the old values.
  TZ_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

}  // namespace tierzero::comm::comm_detail
