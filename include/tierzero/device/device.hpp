// Device, Stream and Event: where compute runs and how work is ordered.
// Copies, collectives and compute are ordered by events rather than by host synchronization, on
// every backend: on CUDA streams and events wrap cudaStream_t / cudaEvent_t; on the CPU a stream
// from create_stream() is a worker thread running its work in FIFO order, and the default stream
// is inline (work issued on it runs at once on the caller's thread). The CPU backend is a real
// asynchronous backend so that overlap logic runs, and is tested, on machines without a GPU.
// Layers above see only this API; docs/streams.md describes the semantics in full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tierzero/core/tensor.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero {

// An ordered queue of work. Work issued on one stream runs in issue order; work on different
// streams may overlap unless ordered by an Event. Issuing from several threads is safe.
// Destroying a stream waits for the work already issued on it (never throws).
class Stream {
 public:
  virtual ~Stream() = default;
  // Waits on the host until everything issued so far has run. Throws Error when work on the
  // stream failed (a CPU task or a host_task threw; a CUDA error); a failed CPU stream stays
  // failed: every later synchronize() throws the same Error and later work on it is skipped.
  virtual void synchronize() = 0;
  virtual void* native() = 0;  // cudaStream_t on CUDA, null on the CPU
};

// A point in a stream's work. Recording again re-arms the event: query, synchronize and waits
// issued afterwards refer to the most recent record (as in CUDA). A never-recorded event counts
// as complete. Streams and events of different backends do not mix (an Error).
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;  // marks the point reached by the stream's work
  // True once that work has finished; never blocks. Throws Error when the work before the point
  // failed (CPU backend; CUDA reports errors of the device).
  virtual bool query() = 0;
  virtual void synchronize() = 0;  // waits on the host for that work; throws as query()
  // Later work on `stream` waits for this event (as recorded now) without blocking the host,
  // except on the CPU's inline default stream, whose work runs on the caller's thread: there
  // the caller waits at once.
  virtual void make_wait(Stream& stream) = 0;
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

  // Stream-ordered, asynchronous as cudaMemcpyAsync / cudaMemsetAsync: the buffers must stay
  // valid and untouched until the work has run (synchronize the stream or an event after it).
  // On the CPU's inline default stream they complete before returning.
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) = 0;
  virtual void fill_zero(void* dst, size_t bytes, Stream& stream) = 0;

  // Runs `fn` on the host in stream order: after the work issued on `stream` before it, and
  // before the work issued after it. CPU worker stream: on the worker thread; CPU inline stream:
  // at once on the caller's thread (an exception propagates to the caller); CUDA: from CUDA's
  // host-callback thread (cudaLaunchHostFunc), so neither `fn` nor the destructors of what it
  // captures may call CUDA (no DeviceBuffer, no event). An exception thrown by `fn` on a CPU
  // worker or CUDA stream fails the stream: see Stream::synchronize(). On CUDA that skips the
  // stream's later host tasks but not its device work, and events do not carry the failure.
  // The fallback for backends without host callbacks synchronizes the stream, then runs `fn`.
  virtual void host_task(Stream& stream, std::function<void()> fn) {
    stream.synchronize();
    fn();
  }

  // The stream the kernels issue on. On the CPU it is inline: work on it runs on the caller's
  // thread before the call returns, because the CPU kernels compute on the caller's (OpenMP)
  // threads; a worker thread in between would only add a hand-off per kernel.
  virtual Stream& default_stream() = 0;
  // A new stream (on the CPU: with its own worker thread).
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

// What a device name says: "cpu", "cuda" (index 0) or "cuda:N" (N decimal digits only, at most
// INT_MAX). False for any other name; `cuda_index` (nullable) is set for CUDA. The one reading of
// a device name: the config, the commands' flags and make_device all go through it.
bool parse_device_name(const std::string& name, DeviceKind* kind, int* cuda_index = nullptr);

// "cpu" or "cuda[:N]" (parse_device_name); an Error naming `spec` for any other name.
std::unique_ptr<Device> make_device(const std::string& spec, int cpu_threads = 0);

}  // namespace tierzero
