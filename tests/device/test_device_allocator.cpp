// DeviceAllocator on the CPU device: budget errors, block reuse, tracker agreement.
#include <gtest/gtest.h>

#include <cstring>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"

using namespace tierzero;

TEST(DeviceAllocator, ReportsEveryByteToTheTrackerByCategory) {
  MemoryTracker tracker;
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 64 << 20, tracker);
  {
    DeviceBuffer p = alloc.allocate(1000, Category::param, "p");
    DeviceBuffer a = alloc.allocate(3 << 20, Category::activation, "a");
    EXPECT_EQ(tracker.current(Tier::device, Category::param), DeviceAllocator::round_size(1000));
    EXPECT_EQ(tracker.current(Tier::device, Category::activation), size_t{3} << 20);
    EXPECT_EQ(alloc.stats().in_use, tracker.current(Tier::device));
    std::memset(a.data(), 1, 3 << 20);  // the memory is real and writable
  }
  EXPECT_EQ(tracker.current(Tier::device), 0u);
  EXPECT_EQ(tracker.peak(Tier::device), DeviceAllocator::round_size(1000) + (size_t{3} << 20));
  EXPECT_EQ(alloc.stats().in_use, 0u);
  EXPECT_GT(alloc.stats().reserved, 0u);  // cached, not returned
}

TEST(DeviceAllocator, ReusesCachedBlocks) {
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 64 << 20);
  void* first = nullptr;
  {
    DeviceBuffer b = alloc.allocate(5 << 20, Category::workspace);
    first = b.data();
  }
  DeviceBuffer again = alloc.allocate((5 << 20) - 100, Category::workspace);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(alloc.stats().cache_hits, 1u);
  // A much smaller request does not take the big block (bounded waste).
  DeviceBuffer small = alloc.allocate(1 << 20, Category::workspace);
  EXPECT_NE(small.data(), first);
}

TEST(DeviceAllocator, BudgetExceededIsAClearError) {
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 8 << 20);
  DeviceBuffer a = alloc.allocate(6 << 20, Category::param, "weights");
  try {
    DeviceBuffer b = alloc.allocate(4 << 20, Category::activation, "acts");
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    std::string m = e.what();
    std::printf("error: %s\n", m.c_str());
    EXPECT_NE(m.find("request of 4.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("activation (acts)"), std::string::npos) << m;
    EXPECT_NE(m.find("budget 8.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("peak 6.0 MiB"), std::string::npos) << m;
  }
  // Nothing leaked: the first block is intact and the budget still usable after freeing it.
  a.reset();
  DeviceBuffer c = alloc.allocate(8 << 20, Category::activation);
  EXPECT_TRUE(static_cast<bool>(c));
}

TEST(DeviceAllocator, CachedBlocksAreReleasedToMakeRoom) {
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 10 << 20);
  { DeviceBuffer a = alloc.allocate(6 << 20, Category::workspace); }
  EXPECT_EQ(alloc.stats().reserved, size_t{6} << 20);
  DeviceBuffer b = alloc.allocate(9 << 20, Category::workspace);  // needs the cache emptied
  EXPECT_EQ(alloc.stats().reserved, size_t{9} << 20);
}

TEST(DeviceAllocator, MoveTransfersOwnership) {
  MemoryTracker tracker;
  auto dev = make_cpu_device();
  DeviceAllocator alloc(*dev, 0, tracker);
  DeviceBuffer a = alloc.allocate(4096, Category::grad);
  DeviceBuffer b = std::move(a);
  EXPECT_FALSE(static_cast<bool>(a));
  EXPECT_EQ(tracker.current(Tier::device, Category::grad), 4096u);
  b = DeviceBuffer();
  EXPECT_EQ(tracker.current(Tier::device, Category::grad), 0u);
}

TEST(Device, CpuStreamsAndEventsRunInOrder) {
  auto dev = make_cpu_device();
  auto s = dev->create_stream();
  auto e0 = dev->create_event();
  auto e1 = dev->create_event();
  e0->record(*s);
  e1->record(*s);
  EXPECT_TRUE(e1->query());
  EXPECT_GE(e1->elapsed_ms_since(*e0), 0.0);
  EXPECT_THROW(make_device("tpu"), Error);
  std::string reason;
  if (cuda_device_count(&reason) == 0) {
    std::printf("no CUDA device: %s\n", reason.c_str());
    EXPECT_FALSE(reason.empty());
  }
}
