// NvmeEngine's queue and its raw mode: never more than queue_depth requests in the ring, the
// ring filled to that depth when there is enough work, and the same bytes back with the
// checksums off (the raw I/O bench io measures beside the checked engine), through registered
// memory and through the bounce buffers alike. The checks themselves run on the verifier
// thread; test_nvme_faults covers a corrupt chunk found there.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
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

}  // namespace
}  // namespace tierzero::offload
