// StreamPipeline: streams a tensor that lives in swap through a ring of pinned staging buffers,
// NVMe -> host (-> device) and back, overlapping I/O with the caller's work: while the caller
// handles chunk i, chunks i+1.. are being read ahead and chunks ..i-1 written behind. This is what
// the optimizer step over NVMe-resident states and the parameter prefetch are built on.
// Memory is bounded: buffer_count x buffer_bytes from the HostPool, whatever the tensor's size.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"

namespace tierzero {
class Device;
class Stream;
}  // namespace tierzero

namespace tierzero::offload {

class SwapSpace;

struct StreamOptions {
  size_t buffer_count = 4;                 // staging buffers in the ring (>= 2)
  size_t buffer_bytes = size_t{64} << 20;  // bytes per buffer = bytes per chunk
};

class StreamPipeline {
 public:
  // The staging buffers come from `pool` (category io) and are registered with the engine.
  StreamPipeline(NvmeEngine& engine, HostPool& pool, StreamOptions options);
  ~StreamPipeline();
  StreamPipeline(const StreamPipeline&) = delete;
  StreamPipeline& operator=(const StreamPipeline&) = delete;

  // The extents a tensor of `bytes` needs, chunked to this pipeline's buffer size.
  std::vector<Extent> allocate(SwapSpace& swap, size_t bytes, Category category,
                               const char* label) const;

  // Called with each chunk in order: the staging memory (chunk_bytes bytes, 4 KiB aligned) and
  // the chunk's byte offset within the tensor.
  using ChunkFn = std::function<void(std::byte* chunk, size_t chunk_bytes, size_t offset)>;

  enum class Mode {
    read,             // NVMe -> fn (fn consumes)
    read_write_back,  // NVMe -> fn (fn updates in place) -> NVMe
    write,            // fn fills -> NVMe
  };
  // Streams every chunk of `extents` through `fn`. Throws the first I/O Error after letting the
  // requests already in flight finish (so no buffer is reused while the drive still uses it).
  void run(const std::vector<Extent>& extents, Mode mode, const ChunkFn& fn);

  // Conveniences built on run(): host memory <-> swap.
  void store(const std::vector<Extent>& extents, const void* src);
  void load(const std::vector<Extent>& extents, void* dst);
  // Device memory <-> swap, through the staging buffers and `stream` (on the CPU backend the
  // "device" is host memory and the copy is a memcpy).
  void load_to_device(const std::vector<Extent>& extents, void* device_dst, Device& device,
                      Stream& stream);
  void store_from_device(const std::vector<Extent>& extents, const void* device_src, Device& device,
                         Stream& stream);

  const StreamOptions& options() const { return options_; }

 private:
  NvmeEngine& engine_;
  StreamOptions options_;
  std::vector<PinnedBuffer> buffers_;  // (buffer_count) staging buffers of buffer_bytes each
};

}  // namespace tierzero::offload
