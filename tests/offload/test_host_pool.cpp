// HostPool: page alignment, reuse by size class, the hard budget and its error, and that the
// MemoryTracker's host numbers equal what was handed out.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::offload {
namespace {

TEST(HostPool, AlignedReusedAndTracked) {
  MemoryTracker tracker;
  auto cpu = make_cpu_device(1);
  HostPool pool(size_t{64} << 20, cpu.get(), tracker);
  std::vector<PinnedBuffer> held;
  size_t expected = 0;
  for (size_t bytes :
       {size_t{1}, size_t{4096}, size_t{5000}, size_t{1} << 20, (size_t{3} << 20) + 17}) {
    held.push_back(pool.allocate(bytes, Category::optimizer, "test block"));
    PinnedBuffer& b = held.back();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(b.capacity(), HostPool::round_size(bytes));
    std::memset(b.data(), 0xAB, b.capacity());  // the whole size class is usable
    expected += b.capacity();
  }
  std::printf("handed out %zu bytes; tracker host/optimizer %zu, pool in_use %zu\n", expected,
              tracker.current(Tier::host, Category::optimizer), pool.stats().in_use);
  EXPECT_EQ(tracker.current(Tier::host, Category::optimizer), expected);
  EXPECT_EQ(tracker.current(Tier::host), expected);
  EXPECT_EQ(pool.stats().in_use, expected);
  void* first = held[3].data();
  held.clear();
  EXPECT_EQ(tracker.current(Tier::host), 0u);
  EXPECT_EQ(tracker.peak(Tier::host), expected);
  PinnedBuffer again = pool.allocate(size_t{1} << 20, Category::io, "reuse");  // (1 MiB)
  EXPECT_EQ(again.data(), first) << "a cached block of the same size class is reused";
  EXPECT_EQ(pool.stats().cache_hits, 1u);
  EXPECT_EQ(tracker.current(Tier::host, Category::io), size_t{1} << 20);
}

TEST(HostPool, BudgetHoldsWithClearError) {
  MemoryTracker tracker;
  const size_t budget = size_t{8} << 20;
  HostPool pool(budget, nullptr, tracker);
  std::vector<PinnedBuffer> held;
  for (int i = 0; i < 8; ++i) held.push_back(pool.allocate(size_t{1} << 20, Category::param, "p"));
  EXPECT_EQ(pool.stats().reserved, budget);
  std::string message;
  try {
    (void)pool.allocate(4096, Category::grad, "grad shard 7");
  } catch (const Error& e) {
    message = e.what();
  }
  std::printf("over-budget error: %s\n", message.c_str());
  EXPECT_NE(message.find("budget exceeded"), std::string::npos);
  EXPECT_NE(message.find("grad shard 7"), std::string::npos);
  EXPECT_NE(message.find("4.0 KiB"), std::string::npos) << "names the size asked for";
  EXPECT_NE(message.find("8.0 MiB"), std::string::npos) << "names the budget";
  EXPECT_EQ(tracker.current(Tier::host), budget) << "a refused request is not counted";

  // Freed blocks are cached, and evicted when a different size class needs the room.
  held.clear();
  PinnedBuffer big = pool.allocate(size_t{6} << 20, Category::param, "big");  // (6 MiB)
  EXPECT_LE(pool.stats().reserved, budget);
  EXPECT_EQ(tracker.current(Tier::host), size_t{6} << 20);
  EXPECT_THROW((void)pool.allocate(size_t{3} << 20, Category::param, "too much"), Error);
  EXPECT_LE(pool.stats().peak_reserved, budget);
}

TEST(HostPool, RejectsZeroBudget) {
  EXPECT_THROW(HostPool(0), Error);
}

}  // namespace
}  // namespace tierzero::offload
