// Device, Stream and Event: where compute runs and how work is ordered.
// On the CPU backend work runs in call order, so streams are trivially ordered and events are
// always complete; on CUDA they wrap cudaStream_t / cudaEvent_t. Layers above see only this API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tierzero/core/tensor.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero {

class Stream {
 public:
  virtual ~Stream() = default;
  virtual void synchronize() = 0;
  virtual void* native() = 0;  // cudaStream_t on CUDA, null on the CPU
};

class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;     // marks the point reached by the stream's work
  virtual bool query() = 0;                    // true once that work has finished
  virtual void synchronize() = 0;              // waits on the host for that work
  virtual void make_wait(Stream& stream) = 0;  // later work on `stream` waits for this event
  virtual double elapsed_ms_since(Event& start) = 0;  // both recorded; device time between them
};

enum class CopyKind { host_to_device, device_to_host, device_to_device };

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  virtual std::string name() const = 0;
  virtual size_t total_memory() const = 0;  // bytes of memory the device has (RAM on the CPU)
  // Bytes in use on the device as its driver reports them (on CUDA: total - free from
  // cudaMemGetInfo, which includes what no allocator of ours asked for: the CUDA context,
  // cuBLAS and NCCL workspaces), or -1 where the backend has no such count (the CPU).
  virtual int64_t driver_used_bytes() const { return -1; }

  // Unpooled memory from the backend (malloc / cudaMalloc), 256-byte aligned at least.
  // Throws Error naming the size when the backend refuses. Only allocators call these.
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;

  // Page-locks host memory this device will copy to and from (cudaHostRegister on CUDA), so that
  // copies are real DMA and overlap compute. Nothing to do on the CPU backend.
  virtual void register_host(void* ptr, size_t bytes) = 0;
  virtual void unregister_host(void* ptr) = 0;

  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) = 0;
  virtual void fill_zero(void* dst, size_t bytes, Stream& stream) = 0;

  virtual Stream& default_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  // The compute kernels bound to this device, issuing work on default_stream().
  virtual kernels::Kernels& kernels() = 0;
};

// The CPU device: compute with OpenMP threads (0 = OpenMP's default count).
std::unique_ptr<Device> make_cpu_device(int threads = 0);

// Number of usable CUDA devices; 0 without a GPU or in a build without CUDA.
// When 0, `reason` (if given) says why, for tests that skip.
int cuda_device_count(std::string* reason = nullptr);
// A CUDA device; throws Error when the build has no CUDA or the index is not there.
std::unique_ptr<Device> make_cuda_device(int index);

// "cpu" or "cuda[:N]".
std::unique_ptr<Device> make_device(const std::string& spec, int cpu_threads = 0);

}  // namespace tierzero
