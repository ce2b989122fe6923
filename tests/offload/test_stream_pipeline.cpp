// StreamPipeline: the output equals the input bitwise for sizes that do and do not divide the
// buffer size, in every mode; read-modify-write updates every byte; the device path round trips
// (through the CPU device here, a GPU in test_offload_cuda.cpp); memory stays within the ring.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/stream_pipeline.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

using testing::random_bytes;
using testing::TempDir;

struct Rig {
  TempDir dir;
  MemoryTracker tracker;
  HostPool pool{size_t{16} << 20, nullptr, tracker};
  std::unique_ptr<NvmeEngine> engine;
  std::unique_ptr<SwapSpace> swap;
  std::unique_ptr<StreamPipeline> pipe;
  explicit Rig(size_t buffers, size_t buffer_bytes = 64 << 10) {
    NvmeOptions o;
    o.directories = {dir.path()};
    o.block_size = 32 << 10;  // chunks span two stripe units
    o.queue_depth = 8;
    o.io_timeout_s = 30;
    engine = std::make_unique<NvmeEngine>(o, &pool);
    swap = std::make_unique<SwapSpace>(*engine, 0, tracker);
    pipe = std::make_unique<StreamPipeline>(*engine, pool, StreamOptions{buffers, buffer_bytes});
  }
};

size_t mismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t m = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m += a[i] != b[i];
  return m;
}

TEST(StreamPipeline, StoreLoadIsBitExactForDividingAndNonDividingSizes) {
  for (size_t buffers : {size_t{2}, size_t{3}, size_t{4}}) {
    Rig rig(buffers);
    const size_t B = 64 << 10;
    for (size_t bytes : {B, 8 * B, 8 * B + 1, 5 * B - 4095, size_t{1}, size_t{0}, 3 * B + 777}) {
      const std::vector<uint8_t> in = random_bytes(bytes, bytes + buffers);  // (bytes)
      std::vector<uint8_t> out(bytes, 0xCC);                                 // (bytes)
      auto extents = rig.pipe->allocate(*rig.swap, bytes, Category::optimizer, "tensor");
      rig.pipe->store(extents, in.data());
      rig.pipe->load(extents, out.data());
      const size_t bad = mismatches(in, out);
      std::printf("buffers %zu, %8zu bytes (%zu chunks): %zu mismatches\n", buffers, bytes,
                  extents.size(), bad);
      EXPECT_EQ(bad, 0u);
      for (const Extent& e : extents) rig.swap->free(e);
    }
    EXPECT_EQ(rig.tracker.current(Tier::nvme), 0u);
    EXPECT_EQ(rig.tracker.current(Tier::host, Category::io),
              buffers * B + 8 * (32 << 10))  // staging ring + the engine's bounce buffers
        << "host memory is the ring and the bounce buffers, whatever the tensor size";
  }
}

TEST(StreamPipeline, ReadWriteBackTouchesEveryByteInOrder) {
  Rig rig(4);
  const size_t bytes = 10 * (64 << 10) + 12345;
  const std::vector<uint8_t> in = random_bytes(bytes, 77);  // (bytes)
  auto extents = rig.pipe->allocate(*rig.swap, bytes, Category::optimizer, "m");
  rig.pipe->store(extents, in.data());
  size_t expected_offset = 0, visited = 0;
  rig.pipe->run(extents, StreamPipeline::Mode::read_write_back,
                [&](std::byte* chunk, size_t n, size_t offset) {
                  EXPECT_EQ(offset, expected_offset) << "chunks arrive in order";
                  EXPECT_EQ(reinterpret_cast<uintptr_t>(chunk) % 4096, 0u);
                  expected_offset += n;
                  for (size_t i = 0; i < n; ++i)
                    chunk[i] = static_cast<std::byte>(static_cast<uint8_t>(chunk[i]) + 1);
                  visited += n;
                });
  std::vector<uint8_t> out(bytes), want(bytes);  // (bytes)
  for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(in[i] + 1);
  rig.pipe->load(extents, out.data());
  const size_t bad = mismatches(want, out);
  std::printf("read-modify-write of %zu bytes: visited %zu, %zu mismatches\n", bytes, visited, bad);
  EXPECT_EQ(visited, bytes);
  EXPECT_EQ(bad, 0u);
}

TEST(StreamPipeline, DeviceRoundTripThroughTheCpuDevice) {
  Rig rig(3);
  auto cpu = make_cpu_device(1);
  const size_t bytes = 7 * (64 << 10) + 5;
  const std::vector<uint8_t> in = random_bytes(bytes, 99);  // (bytes)
  std::vector<uint8_t> device_mem(bytes), back(bytes);      // (bytes) the CPU device's "memory"
  auto extents = rig.pipe->allocate(*rig.swap, bytes, Category::param, "w");
  rig.pipe->store(extents, in.data());
  rig.pipe->load_to_device(extents, device_mem.data(), *cpu, cpu->default_stream());
  std::fill(back.begin(), back.end(), 0);
  auto extents2 = rig.pipe->allocate(*rig.swap, bytes, Category::param, "w2");
  rig.pipe->store_from_device(extents2, device_mem.data(), *cpu, cpu->default_stream());
  rig.pipe->load(extents2, back.data());
  const size_t bad1 = mismatches(in, device_mem), bad2 = mismatches(in, back);
  std::printf("swap->device %zu mismatches, device->swap->host %zu mismatches (%zu bytes)\n", bad1,
              bad2, bytes);
  EXPECT_EQ(bad1, 0u);
  EXPECT_EQ(bad2, 0u);
}

TEST(StreamPipeline, ErrorsLeaveNoRequestBehind) {
  Rig rig(2);
  const size_t bytes = 4 * (64 << 10);
  auto extents = rig.pipe->allocate(*rig.swap, bytes, Category::param, "unwritten");
  std::vector<uint8_t> out(bytes);  // (bytes)
  EXPECT_THROW(rig.pipe->load(extents, out.data()), Error) << "nothing was written yet";
  const std::vector<uint8_t> in = random_bytes(bytes, 1);  // (bytes)
  rig.pipe->store(extents, in.data());                     // the pipeline is usable after the error
  rig.pipe->load(extents, out.data());
  EXPECT_EQ(mismatches(in, out), 0u);
}

}  // namespace
}  // namespace tierzero::offload
