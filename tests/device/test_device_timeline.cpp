// DeviceTimeline: spans of work are timed when the stream runs them, not when the host issues
// them. On a worker stream (CPU) or a CUDA stream, two 30 ms tasks issued at once come back as two
// back-to-back 30 ms intervals, after the host had long returned; work outside a step is not
// timed. CUDA runs skip without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_timeline.hpp"

namespace tierzero {
namespace {

class DeviceTimelineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "cuda") {
      std::string reason;
      if (cuda_device_count(&reason) == 0) GTEST_SKIP() << reason;
      device_ = make_cuda_device(0);
    } else {
      device_ = make_cpu_device();
    }
    ActivityLog::global().reset();
    ActivityLog::global().set_recording(true);
  }
  void TearDown() override {
    ActivityLog::global().set_recording(false);
    ActivityLog::global().reset();
  }
  std::unique_ptr<Device> device_;
};

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST_P(DeviceTimelineTest, SpansAreWhenTheStreamRanThem) {
  Device& device = *device_;
  std::unique_ptr<Stream> stream = device.create_stream();
  DeviceTimeline timeline(device);
  timeline.begin_step(*stream);
  const double issued_at = monotonic_seconds();
  const char* names[2] = {"first", "second"};
  for (const char* name : names) {
    const size_t span = timeline.open(*stream);
    device.host_task(*stream, [] { sleep_ms(30); });
    timeline.close(span, *stream, Track::compute, name, 7, 100);
  }
  const double issue_s = monotonic_seconds() - issued_at;
  stream->synchronize();
  EXPECT_EQ(timeline.flush(), 2u);
  const std::vector<Activity> got = ActivityLog::global().take_activities();
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const double ms = (got[i].end_s - got[i].start_s) * 1e3;
    std::printf(
        "%s: %s span %.1f ms, starting %.1f ms after the issue began (issuing took %.2f "
        "ms)\n",
        GetParam(), got[i].name, ms, (got[i].start_s - issued_at) * 1e3, issue_s * 1e3);
    EXPECT_STREQ(got[i].name, names[i]);
    EXPECT_EQ(got[i].track, Track::compute);
    EXPECT_EQ(got[i].unit, 7);
    EXPECT_EQ(got[i].bytes, 100u);
    EXPECT_GE(ms, 29.0);
    EXPECT_LT(ms, 1000.0);
  }
  // The second ran after the first, not when the host issued it (at once, with the first).
  EXPECT_GE(got[1].start_s, got[0].end_s - 1e-3);
  EXPECT_GE(got[1].start_s - issued_at, 0.029);
}

TEST_P(DeviceTimelineTest, WorkOutsideAStepIsNotTimed) {
  Device& device = *device_;
  Stream& stream = device.default_stream();
  DeviceTimeline timeline(device);
  const size_t before = timeline.open(stream);
  EXPECT_EQ(before, DeviceTimeline::kUntimed);
  timeline.close(before, stream, Track::compute, "untimed");
  timeline.begin_step(stream);
  const size_t open_only = timeline.open(stream);
  (void)open_only;  // never closed: dropped
  timeline.close(timeline.open(stream), stream, Track::compute, "timed");
  stream.synchronize();
  EXPECT_EQ(timeline.flush(), 1u);
  EXPECT_EQ(timeline.open(stream), DeviceTimeline::kUntimed);  // flushed: the step is over
  const std::vector<Activity> got = ActivityLog::global().take_activities();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_STREQ(got[0].name, "timed");
  // The pool is reused: many steps allocate no more events than one step's worth.
  for (int step = 0; step < 100; ++step) {
    timeline.begin_step(stream);
    timeline.close(timeline.open(stream), stream, Track::compute, "again");
    stream.synchronize();
    timeline.flush();
  }
  EXPECT_EQ(ActivityLog::global().take_activities().size(), 100u);
}

// A span on another stream than the step's (a copy, a collective) may still run when the step's
// stream has synchronized: flush waits for it and records it whole.
TEST_P(DeviceTimelineTest, FlushWaitsForSpansStillRunningElsewhere) {
  Device& device = *device_;
  std::unique_ptr<Stream> copies = device.create_stream();
  DeviceTimeline timeline(device);
  timeline.begin_step(device.default_stream());
  const size_t span = timeline.open(*copies);
  device.host_task(*copies, [] { sleep_ms(40); });
  timeline.close(span, *copies, Track::host_to_device, "late copy", 3, 64);
  device.default_stream().synchronize();  // the step's stream only
  EXPECT_EQ(timeline.flush(), 1u);
  const std::vector<Activity> got = ActivityLog::global().take_activities();
  ASSERT_EQ(got.size(), 1u);
  const double ms = (got[0].end_s - got[0].start_s) * 1e3;
  std::printf("%s: the late copy's span %.1f ms (its work 40 ms)\n", GetParam(), ms);
  EXPECT_EQ(got[0].track, Track::host_to_device);
  EXPECT_GE(ms, 39.0);
  EXPECT_LT(ms, 1000.0);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceTimelineTest, ::testing::Values("cpu", "cuda"));

}  // namespace
}  // namespace tierzero
