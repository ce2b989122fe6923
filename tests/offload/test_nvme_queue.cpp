// NvmeEngine's queue and its raw mode: never more than queue_depth requests in the ring, the
// ring filled to that depth when there is enough work, and the same bytes back with the
// checksums off (the raw I/O bench io measures beside the checked engine), through registered
// memory and through the bounce buffers alike. The checks themselves run on the verifier
// thread; test_nvme_faults covers a corrupt chunk found there, and the last test here closes the
// engine while checks are still queued, one of them failing.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

using testing::random_bytes;
using testing::TempDir;

NvmeOptions queue_options(const std::string& dir, size_t depth, bool checksums) {
  NvmeOptions o;
  o.directories = {dir};
  o.block_size = 64 << 10;
  o.queue_depth = depth;
  o.io_timeout_s = 30;
  o.checksums = checksums;
  return o;
}

TEST(NvmeQueue, DepthIsRespectedAndFilled) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  for (size_t depth : {1, 4, 16}) {
    HostPool pool(size_t{16} << 20);
    NvmeEngine engine(queue_options(dir.path(), depth, true), &pool);
    SwapSpace swap(engine);
    const size_t bytes = size_t{4} << 20;                                 // 64 requests of 64 KiB
    PinnedBuffer mem = pool.allocate(bytes, Category::io, "queue test");  // (bytes)
    engine.register_memory(mem.data(), bytes);
    const std::vector<uint8_t> src = random_bytes(bytes, 21);  // (bytes)
    std::memcpy(mem.data(), src.data(), bytes);
    Extent e = swap.allocate(bytes, Category::io, "queue test");
    engine.write(e, mem.data()).wait();
    std::memset(mem.data(), 0, bytes);
    engine.read(e, mem.data()).wait();
    const NvmeStats st = engine.stats();
    std::printf("queue depth %zu: %zu requests, at most %zu in flight, %.1f on average\n", depth,
                st.requests, st.max_inflight, st.mean_inflight);
    EXPECT_EQ(std::memcmp(mem.data(), src.data(), bytes), 0);
    EXPECT_EQ(st.max_inflight, depth) << "one extent of 64 requests fills the queue at once";
    EXPECT_LE(st.mean_inflight, static_cast<double>(depth));
    EXPECT_GE(st.mean_inflight, 1.0);
    engine.unregister_memory(mem.data());
  }
}

TEST(NvmeQueue, RawModeRoundTripsRegisteredAndBouncedMemory) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  HostPool pool(size_t{16} << 20);
  NvmeEngine engine(queue_options(dir.path(), 8, false), &pool);
  SwapSpace swap(engine);
  // Registered, aligned memory: straight to the drive, no check, no copy.
  const size_t bytes = size_t{1} << 20;
  PinnedBuffer mem = pool.allocate(bytes, Category::io, "raw test");  // (bytes)
  engine.register_memory(mem.data(), bytes);
  const std::vector<uint8_t> src = random_bytes(bytes, 22);  // (bytes)
  std::memcpy(mem.data(), src.data(), bytes);
  Extent e = swap.allocate(bytes, Category::io, "raw aligned");
  engine.write(e, mem.data()).wait();
  std::memset(mem.data(), 0, bytes);
  engine.read(e, mem.data()).wait();
  EXPECT_EQ(std::memcmp(mem.data(), src.data(), bytes), 0);
  EXPECT_EQ(engine.stats().bounce_copies, 0u);
  engine.unregister_memory(mem.data());
  // An odd length at an odd address: through the bounce buffers, copied out without a check.
  const std::vector<uint8_t> odd = random_bytes(200003, 23);  // (200003)
  std::vector<uint8_t> back(odd.size() + 1, 0);               // (200004) read at offset 1
  Extent f = swap.allocate(odd.size(), Category::io, "raw odd");
  engine.write(f, odd.data()).wait();
  engine.read(f, back.data() + 1).wait();
  EXPECT_EQ(std::memcmp(back.data() + 1, odd.data(), odd.size()), 0);
  EXPECT_GT(engine.stats().bounce_copies, 0u);
  std::printf("raw mode: 1 MiB registered and %zu odd bytes round trip, %zu bounce copies\n",
              odd.size(), engine.stats().bounce_copies);
}

// Closing the engine right after starting many reads (aligned ones checked in place, unaligned
// ones copied out of the bounce buffers, one extent corrupted on disk) waits for the verifier:
// every callback runs exactly once, the good reads are intact and the corrupt one is a CRC error
// naming its file, before the destructor returns.
TEST(NvmeQueue, ClosingWithChecksQueuedFinishesEveryRead) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr size_t kExtents = 24;
  const size_t bytes = 256 << 10;  // 4 requests of 64 KiB per extent
  HostPool pool(size_t{24} << 20);
  PinnedBuffer mem = pool.allocate(kExtents * bytes, Category::io, "close test");  // (24 * bytes)
  std::vector<std::vector<uint8_t>> src;                                           // (24, bytes)
  std::vector<uint8_t> odd_back(kExtents * (bytes + 1));  // (24 * (bytes + 1)) unaligned targets
  std::atomic<size_t> ok{0}, failed{0}, calls{0};
  std::mutex error_mutex;
  std::string error;  // guarded by error_mutex
  std::string victim_file;
  {
    NvmeEngine engine(queue_options(dir.path(), 8, true), &pool);
    SwapSpace swap(engine);
    std::vector<Extent> extents;
    for (size_t i = 0; i < kExtents; ++i) {
      src.push_back(random_bytes(bytes, 100 + i));
      extents.push_back(swap.allocate(bytes, Category::io, "close test"));
      engine.write(extents.back(), src.back().data()).wait();
    }
    // Corrupt one byte of extent 5's second chunk.
    const auto [file, offset] = engine.locate(extents[5].offset + (64 << 10) + 17);
    victim_file = engine.file_path(file);
    {
      const int fd = ::open(victim_file.c_str(), O_RDWR);
      ASSERT_GE(fd, 0);
      uint8_t byte = 0;
      ASSERT_EQ(::pread(fd, &byte, 1, static_cast<off_t>(offset)), 1);
      byte ^= 0x01;
      ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(offset)), 1);
      ASSERT_EQ(::fsync(fd), 0);
      ::close(fd);
    }
    auto on_done = [&](const IoResult& r) {
      ++calls;
      if (r.ok) {
        ++ok;
      } else {
        ++failed;
        std::lock_guard<std::mutex> lock(error_mutex);
        error = r.error;
      }
    };
    for (size_t i = 0; i < kExtents; ++i) {
      void* dst = i % 2 ? static_cast<void*>(odd_back.data() + i * (bytes + 1) + 1)
                        : static_cast<void*>(mem.bytes_ptr() + i * bytes);
      engine.read(extents[i], dst, on_done);  // handles dropped: the engine owns the reads
    }
  }  // the engine closes here, with reads in the ring and checks queued
  EXPECT_EQ(calls.load(), kExtents);
  EXPECT_EQ(ok.load(), kExtents - 1);
  EXPECT_EQ(failed.load(), 1u);
  EXPECT_NE(error.find("CRC32C mismatch"), std::string::npos) << error;
  EXPECT_NE(error.find(victim_file), std::string::npos) << error;
  EXPECT_NE(error.find("chunk 1"), std::string::npos) << error;
  for (size_t i = 0; i < kExtents; ++i) {
    if (i == 5) continue;
    const uint8_t* back = i % 2 ? odd_back.data() + i * (bytes + 1) + 1
                                : static_cast<const uint8_t*>(mem.data()) + i * bytes;
    EXPECT_EQ(std::memcmp(back, src[i].data(), bytes), 0) << "extent " << i;
  }
  std::printf("closed with reads queued: %zu ok, %zu failed: %s\n", ok.load(), failed.load(),
              error.c_str());
}

}  // namespace
}  // namespace tierzero::offload
