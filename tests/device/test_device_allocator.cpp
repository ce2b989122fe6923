// DeviceAllocator on the CPU device: budget errors, block reuse, tracker agreement, and reuse
// that follows the streams (a block freed by held-back work on a worker stream).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>

#include <functional>
#include <stdexcept>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/out_of_memory.hpp"
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
  } catch (const OutOfMemory& e) {  // the kind a caller that can ask for less catches
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

// A block freed on a worker stream whose work is held back: that stream may take it again at
// once; the default stream gets a fresh block while there is budget, and when there is none
// waits for the worker (rather than failing, and rather than taking memory still in use).
TEST(DeviceAllocator, ReuseAcrossStreamsWaitsForTheWorkThatFreedTheBlock) {
  constexpr auto kGenerous = std::chrono::seconds(60);
  auto dev = make_cpu_device();
  auto worker = dev->create_stream();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool released_yet = false;
  auto open_gate = [&] {
    if (!released_yet) release.set_value();
    released_yet = true;
  };
  struct OpenAtExit {  // a failing assertion must not leave the worker blocked at its destruction
    std::function<void()> open;
    ~OpenAtExit() { open(); }
  } open_at_exit{open_gate};

  DeviceAllocator alloc(*dev, 2 << 20);  // room for two 1 MiB blocks
  dev->host_task(*worker, [released, kGenerous] {
    if (released.wait_for(kGenerous) != std::future_status::ready)
      throw std::runtime_error("never released");
  });
  void* first = nullptr;
  {
    DeviceBuffer on_worker = alloc.allocate(1 << 20, Category::workspace, "w", worker.get());
    first = on_worker.data();
    dev->fill_zero(on_worker.data(), on_worker.bytes(), *worker);  // queued behind the gate
  }  // freed while the worker's fill has not run

  {
    // The same stream: at once, its later work runs after the fill.
    DeviceBuffer again = alloc.allocate(1 << 20, Category::workspace, "w", worker.get());
    EXPECT_EQ(again.data(), first);
  }
  // Another stream, with budget left: a fresh block, never the one still in use.
  DeviceBuffer other = alloc.allocate(1 << 20, Category::workspace, "d");
  EXPECT_NE(other.data(), first);
  // Budget exhausted (the cached block and `other`): the next request must wait for the worker.
  std::future<void*> waiting = std::async(std::launch::async, [&] {
    DeviceBuffer b = alloc.allocate(1 << 20, Category::workspace, "waits");
    return b.data();
  });
  EXPECT_NE(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::ready)
      << "a block still in use by held-back work was handed to another stream";
  open_gate();
  ASSERT_EQ(waiting.wait_for(kGenerous), std::future_status::ready) << "allocate never returned";
  EXPECT_EQ(waiting.get(), first) << "the block should have been reused once its work finished";
  EXPECT_NO_THROW(worker->synchronize());
  EXPECT_EQ(alloc.stats().reserved, size_t{2} << 20);
}

TEST(DeviceAllocator, ReleaseCachedWaitsForWorkStillUsingABlock) {
  auto dev = make_cpu_device();
  auto worker = dev->create_stream();
  DeviceAllocator alloc(*dev, 8 << 20);
  std::vector<unsigned char> source(1 << 20, 5);
  {
    DeviceBuffer b = alloc.allocate(1 << 20, Category::workspace, "w", worker.get());
    // Several copies queued: the block must not be returned to the device under them.
    for (int i = 0; i < 8; ++i)
      dev->copy(b.data(), source.data(), b.bytes(), CopyKind::host_to_device, *worker);
  }
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().reserved, 0u);
  EXPECT_NO_THROW(worker->synchronize());
}

// One reading of a device name (parse_device_name), which the config, the commands' flags and
// make_device share: cuda:N takes decimal digits only, up to INT_MAX, so no name wraps to
// another GPU's index or reads a sign or a space.
TEST(DeviceNames, OneReadingForEveryName) {
  const struct {
    const char* name;
    bool ok;
    DeviceKind kind;
    int index;
  } cases[] = {{"cpu", true, DeviceKind::cpu, 0},
               {"cuda", true, DeviceKind::cuda, 0},
               {"cuda:0", true, DeviceKind::cuda, 0},
               {"cuda:7", true, DeviceKind::cuda, 7},
               {"cuda:01", true, DeviceKind::cuda, 1},
               {"cuda:2147483647", true, DeviceKind::cuda, 2147483647},
               {"", false, DeviceKind::cpu, 0},
               {"CPU", false, DeviceKind::cpu, 0},
               {"gpu", false, DeviceKind::cpu, 0},
               {"cudax", false, DeviceKind::cpu, 0},
               {"cuda:", false, DeviceKind::cpu, 0},
               {"cuda:x", false, DeviceKind::cpu, 0},
               {"cuda:+1", false, DeviceKind::cpu, 0},
               {"cuda: 1", false, DeviceKind::cpu, 0},
               {"cuda:-0", false, DeviceKind::cpu, 0},
               {"cuda:1x", false, DeviceKind::cpu, 0},
               {"cuda:2147483648", false, DeviceKind::cpu, 0},
               {"cuda:4294967297", false, DeviceKind::cpu, 0}};
  for (const auto& c : cases) {
    DeviceKind kind = DeviceKind::cpu;
    int index = -1;
    EXPECT_EQ(parse_device_name(c.name, &kind, &index), c.ok) << "'" << c.name << "'";
    if (!c.ok) {
      try {
        make_device(c.name);
        ADD_FAILURE() << "make_device('" << c.name << "') did not throw";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("unknown device '") + c.name + "'"),
                  std::string::npos)
            << e.what();
      }
      continue;
    }
    EXPECT_EQ(kind, c.kind) << c.name;
    if (kind == DeviceKind::cuda) {
      EXPECT_EQ(index, c.index) << c.name;
    }
  }
}
