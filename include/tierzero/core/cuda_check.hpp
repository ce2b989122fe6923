// Check macros for CUDA runtime and cuBLAS/cuBLASLt calls, plus a scoped device switch.
// Every CUDA call in TierZero goes through these so that a failure becomes a tierzero::Error
// naming the call, file:line, the library's own error string and a hint, instead of a silent
// wrong result or a crash later. Header-only; only files that use CUDA include it.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::cuda_detail {

// A hint a user can act on, chosen by the kind of CUDA failure.
inline const char* cuda_error_hint(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower the micro-batch size, enable activation "
             "checkpointing or offload more state (offload_param / offload_optimizer); check "
             "nvidia-smi for other processes on this GPU";
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return "check the device index against nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
      return "the NVIDIA driver is older than this CUDA toolkit; update the driver";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
      return "a kernel faulted and the CUDA context is now unusable; rerun with "
             "CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer to find the kernel";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "TierZero was not compiled for this GPU's architecture; reconfigure with "
             "-DCMAKE_CUDA_ARCHITECTURES=<your sm>";
    case cudaErrorInvalidConfiguration:
      return "a kernel launch had an invalid grid or block size (a TierZero bug: report the "
             "shapes that triggered it)";
    default:
      return "errors from asynchronous work surface at a later call; rerun with "
             "CUDA_LAUNCH_BLOCKING=1 to see where it really happened";
  }
}

inline std::string cuda_failure_message(const char* expr, cudaError_t status) {
  return std::string("CUDA call `") + expr + "` failed: " + cudaGetErrorString(status) + " (" +
         cudaGetErrorName(status) + ")";
}

// cuBLAS and cuBLASLt share cublasStatus_t; this avoids linking libcublas just for
// cublasGetStatusName.
inline const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_<unknown>";
}

inline const char* cublas_status_hint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the cuBLAS(Lt) handle was not created; is the CUDA driver working (nvidia-smi)?";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "cuBLAS could not allocate memory: the GPU or host is out of memory";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "bad shapes, leading dimensions, or a workspace smaller than the algorithm needs "
             "(a TierZero bug: report the shapes)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "this GPU or cuBLASLt version has no algorithm for the requested matmul";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "a cuBLAS kernel failed to run; an earlier asynchronous CUDA error may be the cause "
             "(rerun with CUDA_LAUNCH_BLOCKING=1)";
    default:
      return "see the cuBLAS status name; rerun with CUBLASLT_LOG_LEVEL=5 for cuBLASLt's log";
  }
}

}  // namespace tierzero::cuda_detail

// Throws tierzero::Error when a CUDA runtime call fails. The runtime's per-thread "last error"
// is cleared first, so that a handled failure (e.g. an out-of-memory cudaMalloc) is not
// reported again by a later cudaGetLastError() after a kernel launch.
#define TZ_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    const cudaError_t tz_cuda_status_ = (expr);                                       \
    if (tz_cuda_status_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                                       \
      TZ_THROW(::tierzero::cuda_detail::cuda_failure_message(#expr, tz_cuda_status_), \
               ::tierzero::cuda_detail::cuda_error_hint(tz_cuda_status_));            \
    }                                                                                 \
  } while (0)

// Throws tierzero::Error when a cuBLAS or cuBLASLt call returns anything but success.
#define TZ_CUBLAS_CHECK(expr)                                                      \
  do {                                                                             \
    const cublasStatus_t tz_cublas_status_ = (expr);                               \
    if (tz_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                              \
      TZ_THROW(std::string("cuBLAS call `" #expr "` failed: ") +                   \
                   ::tierzero::cuda_detail::cublas_status_name(tz_cublas_status_), \
               ::tierzero::cuda_detail::cublas_status_hint(tz_cublas_status_));    \
    }                                                                              \
  } while (0)

namespace tierzero {

// Makes `device` current for the calling thread for the guard's lifetime and restores the
// previous device afterwards. Work for one Device may be issued from several threads (I/O
// workers, the optimizer), and CUDA's current device is per thread, so every entry point that
// creates CUDA objects or launches work takes one of these.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    TZ_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      TZ_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }
  ~CudaDeviceGuard() {
    // A destructor must not throw; restoring can only fail if the context is already broken,
    // which the next checked call reports.
    if (switched_) (void)cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace tierzero
