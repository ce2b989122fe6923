// Pieces shared by the comm backends but not part of the public API: the process-wide failure
// flag's setter, the timeout error every backend raises, and the host scratch buffers that
// stage device data and widen bf16/fp16 to fp32 for reductions.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/core/dtype.hpp"

namespace tierzero::comm::comm_detail {

// Marks this process's communication as failed (see comm_failed()).
void mark_failed();

// "reduce_scatter of 4096 x bf16 per rank (sum) on group dp (ranks 0-3)"
std::string describe_op(const char* op, size_t count, DType dtype, const std::string& group,
                        const char* extra = nullptr);

// Throws the Error for an operation that missed its deadline, after marking the failure.
[[noreturn]] void throw_timeout(const std::string& what, double timeout_s);
// Throws the Error for an operation whose ready event (see Communicator) did not complete before
// its deadline, after marking the failure: the group is out of step, as for a timeout.
[[noreturn]] void throw_ready_timeout(const std::string& what, double timeout_s);
// Throws the Error for an operation issued after another one in this process failed.
[[noreturn]] void throw_after_failure(const std::string& what);

// A grow-only host buffer from the process's staging source (host_staging.hpp): the heap,
// reported to the MemoryTracker as tier host, category comm, or the allocator set, which
// accounts for it. Used by one thread at a time (an engine thread); the source's lock guards it
// against set_host_staging_allocator.
class HostScratch {
 public:
  explicit HostScratch(const char* label);
  ~HostScratch();
  HostScratch(const HostScratch&) = delete;
  HostScratch& operator=(const HostScratch&) = delete;
  void* get(size_t bytes);  // at least `bytes`, 64-byte aligned; contents undefined
  void release_locked();    // frees the buffer (the caller holds the source's lock)

 private:
  const char* label_;
  void* data_ = nullptr;  // (bytes_) raw bytes
  size_t bytes_ = 0;
  bool from_allocator_ = false;  // else the heap
};

// Whether `ptr` is CUDA device memory that the host cannot read (false in builds without CUDA
// or on machines without a GPU), and copies between it and host memory. The copies are
// synchronous: the MPI backend stages on its engine thread, off the caller's path.
bool is_device_pointer(const void* ptr);
void copy_device_to_host(void* host, const void* device, size_t bytes);
void copy_host_to_device(void* device, const void* host, size_t bytes);

}  // namespace tierzero::comm::comm_detail
