// The CUDA implementation of Device, Stream and Event (cudaMalloc, non-blocking streams,
// timing events), plus cuda_device_count() and make_cuda_device(). Compiled as plain C++ against
// the CUDA runtime only when TierZero is built with CUDA; cuda_absent.cpp stands in otherwise.
// Host tasks run through cudaLaunchHostFunc; their exceptions are kept per stream and rethrown
// by that stream's synchronize(), as on the CPU backend.
// Every call that creates CUDA objects or issues work first switches to this device, because
// the current device is per thread and I/O or optimizer threads may drive the same Device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "task_failure.hpp"

#include "tierzero/core/cuda_check.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/out_of_memory.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/host_waits.hpp"
#include "tierzero/kernels/cuda_kernels.hpp"

namespace tierzero {

namespace {

// "1.50 GiB" style, for error messages people read.
std::string human_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.2f %s", value, units[unit]);
  return buffer;
}

// Destructors cannot throw; a failed release is logged instead. At process exit the runtime may
// already be gone (cudaErrorCudartUnloading), which is harmless and not worth a warning.
void warn_if_failed(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (status == cudaErrorCudartUnloading) return;
  log::warn(std::string(what) + " failed: " + cudaGetErrorString(status) + " (" +
            cudaGetErrorName(status) + ")");
}

// What a stream shares with its host tasks, which CUDA may run after the stream object is gone:
// the first exception one of them threw.
struct HostTaskState {
  std::mutex mutex;
  device_detail::TaskFailure failure;
};

// One host task on the heap, owned by CUDA's callback from launch until it has run.
struct HostTask {
  std::function<void()> fn;
  std::shared_ptr<HostTaskState> state;
};

// Runs on CUDA's callback thread; nothing may escape it. After a failure the stream's later host
// tasks are skipped (they may depend on the failed one); its device work is not.
void CUDART_CB run_host_task(void* user_data) {
  std::unique_ptr<HostTask> task(static_cast<HostTask*>(user_data));
  {
    std::lock_guard<std::mutex> lock(task->state->mutex);
    if (task->state->failure) return;
  }
  try {
    task->fn();
  } catch (...) {
    device_detail::TaskFailure failure =
        device_detail::capture_task_failure(std::current_exception());
    std::lock_guard<std::mutex> lock(task->state->mutex);
    if (!task->state->failure) task->state->failure = std::move(failure);
  }
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device) : device_(device) {
    CudaDeviceGuard guard(device_);
    // Non-blocking: never serialised against the legacy default stream that other libraries
    // may use implicitly.
    TZ_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override {
    // Returns at once; CUDA releases the stream after its queued work has finished.
    warn_if_failed(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  void synchronize() override {
    count_host_wait();
    TZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::lock_guard<std::mutex> lock(host_tasks_->mutex);
    if (host_tasks_->failure) throw Error(*host_tasks_->failure);
  }
  void* native() override { return stream_; }

  int device() const { return device_; }
  cudaStream_t handle() const { return stream_; }
  const std::shared_ptr<HostTaskState>& host_tasks() const { return host_tasks_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<HostTaskState> host_tasks_ = std::make_shared<HostTaskState>();
};

// Streams from the CPU backend (or any other) cannot order CUDA work; mixing them is a bug in
// the caller, reported as such rather than silently using the legacy default stream.
CudaStream& as_cuda_stream(Stream& stream, const char* operation) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  TZ_CHECK(cuda_stream != nullptr,
           std::string(operation) + ": the stream does not belong to a CUDA device",
           "use streams created by the CUDA device (default_stream() or create_stream())");
  return *cuda_stream;
}

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device) : device_(device) {
    CudaDeviceGuard guard(device_);
    // Timing stays enabled: elapsed_ms_since() is how benchmarks and the profiler measure.
    TZ_CUDA_CHECK(cudaEventCreate(&event_));
  }
  ~CudaEvent() override { warn_if_failed(cudaEventDestroy(event_), "cudaEventDestroy"); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(Stream& stream) override {
    CudaStream& cuda_stream = as_cuda_stream(stream, "Event::record");
    TZ_CHECK(cuda_stream.device() == device_,
             "Event::record: event of cuda:" + std::to_string(device_) +
                 " recorded on a stream of cuda:" + std::to_string(cuda_stream.device()),
             "create the event on the device whose stream records it");
    CudaDeviceGuard guard(device_);
    TZ_CUDA_CHECK(cudaEventRecord(event_, cuda_stream.handle()));
    recorded_ = true;
  }

  bool query() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return true;
    // "Not ready" is an answer, not a failure; clear it so the next launch check does not
    // mistake it for a launch error.
    (void)cudaGetLastError();
    if (status == cudaErrorNotReady) return false;
    TZ_THROW(cuda_detail::cuda_failure_message("cudaEventQuery(event)", status),
             cuda_detail::cuda_error_hint(status));
  }

  void synchronize() override {
    count_host_wait();
    TZ_CUDA_CHECK(cudaEventSynchronize(event_));
  }

  void make_wait(Stream& stream) override {
    // The waiting stream may belong to another device; CUDA allows cross-device waits.
    CudaStream& cuda_stream = as_cuda_stream(stream, "Event::make_wait");
    CudaDeviceGuard guard(cuda_stream.device());
    TZ_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream.handle(), event_, 0));
  }

  double elapsed_ms_since(Event& start) override {
    auto* start_event = dynamic_cast<CudaEvent*>(&start);
    TZ_CHECK(start_event != nullptr, "elapsed_ms_since: the start event is not a CUDA event",
             "time CUDA work with two events of the same CUDA device");
    TZ_CHECK(recorded_ && start_event->recorded_,
             "elapsed_ms_since: both events must have been recorded",
             "call record(stream) on the start and the end event first");
    // Waiting here turns "not ready yet" into the answer the caller wants.
    TZ_CUDA_CHECK(cudaEventSynchronize(event_));
    TZ_CUDA_CHECK(cudaEventSynchronize(start_event->event_));
    float milliseconds = 0.0f;
    TZ_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start_event->event_, event_));
    return static_cast<double>(milliseconds);
  }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

cudaMemcpyKind to_cuda_copy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::host_to_device:
      return cudaMemcpyHostToDevice;
    case CopyKind::device_to_host:
      return cudaMemcpyDeviceToHost;
    case CopyKind::device_to_device:
      return cudaMemcpyDeviceToDevice;
  }
  TZ_THROW("unknown CopyKind " + std::to_string(static_cast<int>(kind)), "a TierZero bug");
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    // One rank drives one GPU, so the creating thread (the rank's main thread) keeps this device
    // current; libraries that use the current device implicitly (NCCL) then see the right one.
    TZ_CUDA_CHECK(cudaSetDevice(index_));
    cudaDeviceProp props{};
    TZ_CUDA_CHECK(cudaGetDeviceProperties(&props, index_));
    name_ = props.name;
    total_memory_ = props.totalGlobalMem;
    default_stream_ = std::make_unique<CudaStream>(index_);
  }

  ~CudaDevice() override {
    // The kernels' work (cuBLASLt matmuls using their handle and the workspace) is queued on
    // the default stream: let it finish, then drop the kernels, then free the workspace.
    // The stream itself (a member declared before kernels_) is destroyed after both.
    if (kernels_ != nullptr) {
      warn_if_failed(cudaStreamSynchronize(default_stream_->handle()), "cudaStreamSynchronize");
    }
    kernels_.reset();
    if (workspace_ != nullptr) warn_if_failed(cudaFree(workspace_), "cudaFree(kernels workspace)");
  }

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  int index() const override { return index_; }
  std::string name() const override { return name_; }
  size_t total_memory() const override { return total_memory_; }
  int64_t driver_used_bytes() const override {
    CudaDeviceGuard guard(index_);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return -1;
    return static_cast<int64_t>(total_bytes - free_bytes);
  }

  void* raw_alloc(size_t bytes) override {
    if (bytes == 0) return nullptr;
    CudaDeviceGuard guard(index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);  // 256-byte aligned at least
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // a refused allocation must not poison later launch checks
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      const bool have_info = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
      (void)cudaGetLastError();
      std::string what = "cudaMalloc of " + human_bytes(bytes) + " (" + std::to_string(bytes) +
                         " bytes) on cuda:" + std::to_string(index_) + " (" + name_ +
                         ") failed: " + cudaGetErrorString(status) + " (" +
                         cudaGetErrorName(status) + ")";
      if (have_info) {
        what +=
            "; the device has " + human_bytes(free_bytes) + " free of " + human_bytes(total_bytes);
      }
      const std::string where = error_location(__FILE__, __LINE__, "device");
      if (status == cudaErrorMemoryAllocation)
        throw OutOfMemory(what, where, cuda_detail::cuda_error_hint(status));
      throw Error(what, where, cuda_detail::cuda_error_hint(status));
    }
    return ptr;
  }

  void raw_free(void* ptr) override {
    if (ptr == nullptr) return;
    const cudaError_t status = cudaFree(ptr);
    if (status == cudaSuccess) return;
    (void)cudaGetLastError();
    // At process exit the runtime may already have released everything.
    if (status == cudaErrorCudartUnloading) return;
    TZ_THROW(cuda_detail::cuda_failure_message("cudaFree(ptr)", status),
             cuda_detail::cuda_error_hint(status));
  }

  void register_host(void* ptr, size_t bytes) override {
    if (ptr == nullptr || bytes == 0) return;
    CudaDeviceGuard guard(index_);
    TZ_CUDA_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable));
  }

  void unregister_host(void* ptr) override {
    if (ptr == nullptr) return;
    CudaDeviceGuard guard(index_);
    const cudaError_t status = cudaHostUnregister(ptr);
    if (status == cudaSuccess || status == cudaErrorCudartUnloading) return;
    (void)cudaGetLastError();
    TZ_THROW(cuda_detail::cuda_failure_message("cudaHostUnregister(ptr)", status),
             cuda_detail::cuda_error_hint(status));
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) override {
    if (bytes == 0) return;
    CudaStream& cuda_stream = as_cuda_stream(stream, "Device::copy");
    CudaDeviceGuard guard(index_);
    TZ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda_copy_kind(kind), cuda_stream.handle()));
  }

  void fill_zero(void* dst, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    CudaStream& cuda_stream = as_cuda_stream(stream, "Device::fill_zero");
    CudaDeviceGuard guard(index_);
    TZ_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cuda_stream.handle()));
  }

  void host_task(Stream& stream, std::function<void()> fn) override {
    CudaStream& cuda_stream = as_cuda_stream(stream, "Device::host_task");
    TZ_CHECK(fn != nullptr, "Device::host_task: the function is empty",
             "pass the callable the stream should run");
    auto task = std::make_unique<HostTask>(HostTask{std::move(fn), cuda_stream.host_tasks()});
    CudaDeviceGuard guard(index_);
    TZ_CUDA_CHECK(cudaLaunchHostFunc(cuda_stream.handle(), run_host_task, task.get()));
    (void)task.release();  // run_host_task owns it now
  }

  Stream& default_stream() override { return *default_stream_; }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(index_); }

  std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(index_); }

  kernels::Kernels& kernels() override {
    // Made on first use: a device used only for memory (tests, the estimator) then never
    // creates a cuBLASLt handle or reserves the workspace.
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (!kernels_) {
      std::unique_ptr<kernels::Kernels> made = kernels::make_cuda_kernels(index_);
      const size_t bytes = made->workspace_bytes();
      void* workspace = raw_alloc(bytes);  // (bytes) scratch owned here, used by `made`
      try {
        made->set_workspace(workspace, bytes);
      } catch (...) {
        raw_free(workspace);
        throw;
      }
      made->set_stream(default_stream_->native());
      workspace_ = workspace;
      kernels_ = std::move(made);
    }
    return *kernels_;
  }

 private:
  int index_;
  std::string name_;
  size_t total_memory_ = 0;
  std::unique_ptr<CudaStream> default_stream_;
  std::mutex kernels_mutex_;
  std::unique_ptr<kernels::Kernels> kernels_;
  void* workspace_ = nullptr;  // (kernels_->workspace_bytes()) device memory
};

}  // namespace

int cuda_device_count(std::string* reason) {
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (reason != nullptr) {
        *reason = std::string("no usable CUDA device: cudaGetDeviceCount failed: ") +
                  cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")";
      }
      return 0;
    }
    if (count == 0) {
      if (reason != nullptr) {
        *reason = "no CUDA device visible";
        if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
          *reason += std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")";
        }
      }
      return 0;
    }
    return count;
  } catch (...) {
    // Only string building can throw here (out of memory); the contract is "never throws".
    return 0;
  }
}

std::unique_ptr<Device> make_cuda_device(int index) {
  std::string reason;
  const int count = cuda_device_count(&reason);
  TZ_CHECK(count > 0, "cannot open cuda:" + std::to_string(index) + ": " + reason,
           "check nvidia-smi, the driver, and CUDA_VISIBLE_DEVICES");
  TZ_CHECK(index >= 0 && index < count,
           "cuda:" + std::to_string(index) + " does not exist: " + std::to_string(count) +
               " CUDA device(s) visible",
           "use an index from 0 to " + std::to_string(count - 1) +
               " (indices are relative to CUDA_VISIBLE_DEVICES)");
  return std::make_unique<CudaDevice>(index);
}

}  // namespace tierzero
