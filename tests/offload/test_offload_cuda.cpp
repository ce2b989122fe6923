// The offload layer with a GPU: HostPool memory is registered (pinned) through the CUDA device,
// and tensors stream swap -> pinned host -> device and back bit-exactly. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/stream_pipeline.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

TEST(OffloadCuda, PinnedPoolAndDeviceStreaming) {
  std::string reason;
  if (cuda_device_count(&reason) == 0) GTEST_SKIP() << reason;
  auto gpu = make_cuda_device(0);
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  MemoryTracker tracker;
  HostPool pool(size_t{64} << 20, gpu.get(), tracker);
  EXPECT_TRUE(pool.pinned());

  // Pinned host <-> device copies.
  const size_t bytes = (size_t{5} << 20) + 3;
  const std::vector<uint8_t> in = testing::random_bytes(bytes, 4);   // (bytes)
  PinnedBuffer host = pool.allocate(bytes, Category::io, "pinned");  // (bytes)
  std::memcpy(host.data(), in.data(), bytes);
  void* dev = gpu->raw_alloc(bytes);  // (bytes)
  gpu->copy(dev, host.data(), bytes, CopyKind::host_to_device, gpu->default_stream());
  // A copy from pinned memory is asynchronous: the source may be reused only after it is done.
  gpu->default_stream().synchronize();
  std::memset(host.data(), 0, bytes);
  gpu->copy(host.data(), dev, bytes, CopyKind::device_to_host, gpu->default_stream());
  gpu->default_stream().synchronize();
  const bool copy_ok = std::memcmp(host.data(), in.data(), bytes) == 0;
  std::printf("pinned host <-> device, %zu bytes: %s\n", bytes, copy_ok ? "equal" : "DIFFERENT");
  EXPECT_TRUE(copy_ok);

  // Swap -> pinned staging -> device, and device -> staging -> swap.
  NvmeOptions o;
  o.directories = {dir.path()};
  o.block_size = 1 << 20;
  o.queue_depth = 8;
  NvmeEngine engine(o, &pool);
  SwapSpace swap(engine, 0, tracker);
  StreamPipeline pipe(engine, pool, StreamOptions{3, size_t{1} << 20});
  auto a = pipe.allocate(swap, bytes, Category::param, "a");
  auto b = pipe.allocate(swap, bytes, Category::param, "b");
  pipe.store(a, in.data());
  gpu->fill_zero(dev, bytes, gpu->default_stream());
  pipe.load_to_device(a, dev, *gpu, gpu->default_stream());
  pipe.store_from_device(b, dev, *gpu, gpu->default_stream());
  std::vector<uint8_t> out(bytes);  // (bytes)
  pipe.load(b, out.data());
  size_t bad = 0;
  for (size_t i = 0; i < bytes; ++i) bad += out[i] != in[i];
  std::printf("swap -> device -> swap, %zu bytes: %zu mismatches\n", bytes, bad);
  EXPECT_EQ(bad, 0u);
  gpu->raw_free(dev);
}

}  // namespace
}  // namespace tierzero::offload
