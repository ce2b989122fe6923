// NvmeEngine: asynchronous, checksummed reads and writes of extents in swap files, on io_uring.
// One swap file per directory (one directory per drive) is opened with O_DIRECT in a private
// 0700 directory; the engine's logical swap space is striped over the files in units of
// `block_size`. Extents may have any length: the tail is padded to the 4 KiB alignment on disk
// and the logical size is remembered. Each stripe-unit chunk of an extent carries a CRC32C,
// recorded on write and checked on read, so corruption is an error naming file, offset and
// extent. Files and buffers are registered with io_uring; submissions are batched up to the
// queue depth, and reads are checked on a thread of their own so the ring is refilled promptly.
// Short transfers, EINTR and EAGAIN are retried; ENOSPC, EFBIG, EIO and the rest fail the operation
// with a clear Error. Swap files are removed when the engine closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tierzero::offload {

class HostPool;

constexpr size_t kIoAlignment = 4096;  // O_DIRECT offset/length/address alignment we keep

enum class DirectIo {
  automatic,  // O_DIRECT, falling back to buffered I/O (with a warning) where it is refused
  off,        // buffered I/O
};

struct NvmeOptions {
  std::vector<std::string> directories;  // one per drive; swap files go in a private subdir
  size_t block_size = size_t{1} << 20;   // stripe unit and largest single request; 4 KiB multiple
  size_t queue_depth = 32;               // requests in flight at most
  bool single_submit = false;            // submit each request on its own (DeepSpeed's knob)
  DirectIo direct_io = DirectIo::automatic;
  double io_timeout_s = 120.0;  // IoHandle::wait gives up (with an Error) after this
  int max_retries = 64;         // EINTR/EAGAIN/short-transfer retries per request
  // CRC32C per chunk, recorded on write and checked on read. Off only to measure the raw I/O
  // beside the checked engine (tierzero bench io): nothing then detects corrupt swap data.
  bool checksums = true;
  // Swap files of dead runs found in `directories` are removed at start once at least this old
  // (offload/stale_swap.hpp); files of live engines are locked and never touched.
  double stale_swap_min_age_s = 10.0;
};

// A range of the engine's logical swap space. SwapSpace hands these out; `bytes` is the logical
// length, `padded` what the disk holds (a kIoAlignment multiple, at least kIoAlignment).
struct Extent {
  uint64_t id = 0;      // names the extent in errors and keys its checksums
  uint64_t offset = 0;  // logical offset, kIoAlignment aligned
  size_t bytes = 0;
  size_t padded = 0;
};

// Outcome of one read or write, given to callbacks.
struct IoResult {
  bool ok = true;
  std::string error;  // the first failure, with file, offset and extent, when !ok
  size_t bytes = 0;   // logical bytes moved
};

// Runs once per operation, without the engine's lock, on one of the engine's two threads (the
// verifier thread for reads it checked or copied out of a bounce buffer, the completion thread
// for the rest), so two callbacks may run at the same time. A callback may start new I/O; it
// must not wait for any (it would hold up the thread that finishes it).
using IoCallback = std::function<void(const IoResult&)>;

namespace detail {
struct IoOp;
}

// Completion handle of one read or write. Copyable; all copies see the same operation.
class IoHandle {
 public:
  IoHandle() = default;
  bool poll() const;  // true once finished (successfully or not); never blocks
  // Blocks until finished or the engine's io_timeout_s passes; throws Error on failure/timeout.
  void wait() const;
  IoResult result() const;  // valid once poll() is true
  explicit operator bool() const { return op_ != nullptr; }

 private:
  friend class NvmeEngine;
  explicit IoHandle(std::shared_ptr<detail::IoOp> op) : op_(std::move(op)) {}
  std::shared_ptr<detail::IoOp> op_;
};

struct NvmeStats {
  size_t bytes_written = 0;  // on-disk bytes (padded)
  size_t bytes_read = 0;
  size_t requests = 0;       // requests completed
  size_t retries = 0;        // resubmissions after EINTR/EAGAIN/short transfers
  size_t submit_calls = 0;   // io_uring_submit calls (batching: requests / submit_calls)
  size_t bounce_copies = 0;  // requests staged through the engine's aligned buffers
  size_t max_inflight = 0;   // most requests in the ring at once (at most queue_depth)
  double mean_inflight = 0;  // requests in the ring when one completed, averaged (queue kept full?)
};

class NvmeEngine {
 public:
  // Creates the private directory and swap file in each directory; throws Error naming the
  // directory (missing, not a directory, permission denied, ...). `pool` supplies the bounce
  // buffers (queue_depth x block_size, category io); null: the engine makes its own pool.
  explicit NvmeEngine(NvmeOptions options, HostPool* pool = nullptr);
  ~NvmeEngine();  // waits for in-flight I/O, removes the swap files and directories
  NvmeEngine(const NvmeEngine&) = delete;
  NvmeEngine& operator=(const NvmeEngine&) = delete;

  // Writes extent.bytes bytes from `src` (kept unchanged until completion). Any alignment works;
  // 4 KiB-aligned memory goes to the drive without a copy.
  IoHandle write(const Extent& extent, const void* src, IoCallback on_done = {});
  // Reads the extent into `dst` (extent.bytes bytes) and checks its CRC32C.
  IoHandle read(const Extent& extent, void* dst, IoCallback on_done = {});

  // Registers long-lived memory (e.g. staging buffers) as io_uring fixed buffers so requests
  // within it skip per-request page pinning. Optional; unregister before freeing the memory.
  void register_memory(void* ptr, size_t bytes);
  void unregister_memory(void* ptr);

  void forget(const Extent& extent);  // drops the extent's checksums (SwapSpace::free)

  // Preallocates (fallocate) the swap files to hold logical offsets below `logical_end`, growing
  // in large steps. Writes into preallocated space avoid the file system's slow path for writes
  // that extend a file. Best effort: where it fails (no support, no space) the writes themselves
  // report the error.
  void reserve(uint64_t logical_end);

  const NvmeOptions& options() const;
  bool direct_io() const;  // false when any file fell back to buffered I/O
  size_t file_count() const;
  std::string file_path(size_t i) const;  // for tests and error messages
  // Where a logical offset lands: the file index and the offset in that file.
  std::pair<size_t, uint64_t> locate(uint64_t logical_offset) const;
  NvmeStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// The open(2) the engine uses for swap files; tests replace it to inject faults (e.g. a file
// system that refuses O_DIRECT with EINVAL).
using OpenFn = int (*)(const char* path, int flags, unsigned mode);
extern OpenFn swap_open;

// One io_uring completion as the engine is about to interpret it (for fault injection in tests).
struct Completion {
  bool is_write = false;
  size_t file = 0;              // swap file index (NvmeEngine::file_path)
  uint64_t file_offset = 0;     // where this submission started in that file
  std::byte* buffer = nullptr;  // the memory it transferred (the caller's or a bounce buffer)
  size_t request_bytes = 0;     // bytes this submission asked for (less after a short transfer)
  int res = 0;                  // what the kernel returned: bytes moved, or -errno
};
// Returns the result the engine should act on instead of `res`, e.g. half the bytes (a short
// transfer) or -EIO. Runs on the completion thread with the engine's lock held, so it must not
// call into the engine. Process-wide, like swap_open; an empty function removes it. Costs one
// relaxed atomic load per completion while unset.
using CompletionFilter = std::function<int(const Completion&)>;
void set_completion_filter(CompletionFilter filter);
}  // namespace detail

}  // namespace tierzero::offload
