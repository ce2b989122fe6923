// MemoryTracker: current and peak per tier x category, the timeline, and misuse detection.
#include <gtest/gtest.h>

#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"

using namespace tierzero;

TEST(MemoryTracker, CurrentAndPeakPerTierAndCategory) {
  MemoryTracker t;
  t.on_alloc(Tier::device, Category::param, 100, "p");
  t.on_alloc(Tier::device, Category::grad, 50);
  t.on_alloc(Tier::host, Category::optimizer, 400);
  t.on_free(Tier::device, Category::grad, 50);
  t.on_alloc(Tier::device, Category::activation, 30);
  EXPECT_EQ(t.current(Tier::device, Category::param), 100u);
  EXPECT_EQ(t.current(Tier::device, Category::grad), 0u);
  EXPECT_EQ(t.peak(Tier::device, Category::grad), 50u);
  EXPECT_EQ(t.current(Tier::device), 130u);
  EXPECT_EQ(t.peak(Tier::device), 150u);  // peak of the sum, not the sum of peaks (180)
  EXPECT_EQ(t.current(Tier::host), 400u);
  EXPECT_EQ(t.current(Tier::nvme), 0u);
  auto tl = t.timeline();
  ASSERT_EQ(tl.size(), 5u);
  EXPECT_EQ(tl[3].delta, -50);
  EXPECT_EQ(tl[0].current, 100u);
  EXPECT_STREQ(tl[0].label, "p");
  for (size_t i = 1; i < tl.size(); ++i) EXPECT_GE(tl[i].time_s, tl[i - 1].time_s);
}

TEST(MemoryTracker, ReleasingMoreThanHeldIsAnError) {
  MemoryTracker t;
  t.on_alloc(Tier::host, Category::io, 10);
  EXPECT_THROW(t.on_free(Tier::host, Category::io, 11), Error);
  EXPECT_EQ(t.current(Tier::host, Category::io), 10u);
}

TEST(MemoryTracker, ResetPeaksAndFormat) {
  MemoryTracker t;
  t.on_alloc(Tier::device, Category::workspace, 1 << 20);
  t.on_free(Tier::device, Category::workspace, 1 << 20);
  t.reset_peaks();
  EXPECT_EQ(t.peak(Tier::device), 0u);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
}

TEST(MemoryTracker, TakeTimelineDrainsAndCapacityBoundsIt) {
  MemoryTracker t;
  t.on_alloc(Tier::host, Category::io, 10);
  t.on_free(Tier::host, Category::io, 10);
  auto taken = t.take_timeline();
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_TRUE(t.timeline().empty());
  t.set_timeline_capacity(4);
  for (int i = 0; i < 10; ++i) t.on_alloc(Tier::device, Category::workspace, 1);
  EXPECT_LE(t.timeline().size(), 4u);
  EXPECT_EQ(t.timeline().back().current, 10u);  // the newest events stay
  EXPECT_EQ(t.timeline_dropped() + t.timeline().size(), 10u);
}
