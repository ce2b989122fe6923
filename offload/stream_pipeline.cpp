// StreamPipeline: the read-ahead / write-behind ring (see stream_pipeline.hpp).
// With N buffers, R = N - W chunks are read ahead and W = N / 2 written behind: before chunk i+R
// is read into buffer (i+R) % N, the write of chunk i+R-N (issued W iterations ago, from the same
// buffer) is waited for, so a buffer is never refilled while the drive still reads from it.
#include "tierzero/offload/stream_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {

StreamPipeline::StreamPipeline(NvmeEngine& engine, HostPool& pool, StreamOptions options)
    : engine_(engine), options_(options) {
  TZ_CHECK(options_.buffer_count >= 2, "the streaming pipeline needs at least 2 buffers",
           "raise buffer_count");
  TZ_CHECK(options_.buffer_bytes > 0 && options_.buffer_bytes % kIoAlignment == 0,
           "staging buffer size " + std::to_string(options_.buffer_bytes) +
               " is not a positive multiple of 4 KiB",
           "use a buffer size that is a multiple of 4096 bytes");
  for (size_t i = 0; i < options_.buffer_count; ++i) {
    buffers_.push_back(pool.allocate(options_.buffer_bytes, Category::io, "stream staging buffer"));
    engine_.register_memory(buffers_.back().data(), buffers_.back().capacity());
  }
}

StreamPipeline::~StreamPipeline() {
  for (auto& b : buffers_) engine_.unregister_memory(b.data());
}

std::vector<Extent> StreamPipeline::allocate(SwapSpace& swap, size_t bytes, Category category,
                                             const char* label) const {
  return swap.allocate_chunked(bytes, options_.buffer_bytes, category, label);
}

void StreamPipeline::run(const std::vector<Extent>& extents, Mode mode, const ChunkFn& fn) {
  const size_t n = extents.size();
  const size_t N = buffers_.size();
  const size_t W = mode == Mode::read ? 0 : std::max<size_t>(1, N / 2);
  const size_t R = N - W;
  for (const Extent& e : extents) {
    TZ_CHECK(e.bytes <= options_.buffer_bytes,
             "extent #" + std::to_string(e.id) + " (" + std::to_string(e.bytes) +
                 " bytes) is larger than a staging buffer (" +
                 std::to_string(options_.buffer_bytes) + " bytes)",
             "allocate the tensor with StreamPipeline::allocate");
  }
  std::vector<IoHandle> reads(n), writes(n);  // (chunks) the request of each chunk
  std::vector<size_t> offsets(n, 0);          // (chunks) each chunk's offset in the tensor
  for (size_t i = 1; i < n; ++i) offsets[i] = offsets[i - 1] + extents[i - 1].bytes;
  auto buffer = [&](size_t i) { return buffers_[i % N].bytes_ptr(); };
  auto refill = [&](size_t k) {
    if (k >= n) return;
    if (k >= N && writes[k - N]) writes[k - N].wait();  // the buffer's previous write is done
    if (mode != Mode::write) reads[k] = engine_.read(extents[k], buffer(k));
  };
  try {
    for (size_t k = 0; k < R; ++k) refill(k);
    for (size_t i = 0; i < n; ++i) {
      if (W > 0) refill(i + R);
      if (reads[i]) reads[i].wait();
      if (mode == Mode::write && i >= N && writes[i - N]) writes[i - N].wait();
      fn(buffer(i), extents[i].bytes, offsets[i]);
      if (mode != Mode::read) writes[i] = engine_.write(extents[i], buffer(i));
      if (W == 0) refill(i + N);  // read-only: the buffer is free as soon as fn returns
    }
    for (auto& w : writes) {
      if (w) w.wait();
    }
  } catch (...) {
    // Let every request still using a staging buffer finish before the error leaves.
    for (auto* list : {&reads, &writes}) {
      for (auto& h : *list) {
        try {
          if (h) h.wait();
        } catch (...) {
        }
      }
    }
    throw;
  }
}

void StreamPipeline::store(const std::vector<Extent>& extents, const void* src) {
  const auto* in = static_cast<const std::byte*>(src);
  run(extents, Mode::write, [&](std::byte* chunk, size_t bytes, size_t offset) {
    if (bytes) std::memcpy(chunk, in + offset, bytes);
  });
}

void StreamPipeline::load(const std::vector<Extent>& extents, void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  run(extents, Mode::read, [&](std::byte* chunk, size_t bytes, size_t offset) {
    if (bytes) std::memcpy(out + offset, chunk, bytes);
  });
}

void StreamPipeline::load_to_device(const std::vector<Extent>& extents, void* device_dst,
                                    Device& device, Stream& stream) {
  auto* out = static_cast<std::byte*>(device_dst);
  // The copy must finish before run() refills the staging buffer, hence the synchronize; the
  // next chunks' reads are already in flight meanwhile.
  run(extents, Mode::read, [&](std::byte* chunk, size_t bytes, size_t offset) {
    device.copy(out + offset, chunk, bytes, CopyKind::host_to_device, stream);
    stream.synchronize();
  });
}

void StreamPipeline::store_from_device(const std::vector<Extent>& extents, const void* device_src,
                                       Device& device, Stream& stream) {
  const auto* in = static_cast<const std::byte*>(device_src);
  run(extents, Mode::write, [&](std::byte* chunk, size_t bytes, size_t offset) {
    device.copy(chunk, in + offset, bytes, CopyKind::device_to_host, stream);
    stream.synchronize();
  });
}

}  // namespace tierzero::offload
