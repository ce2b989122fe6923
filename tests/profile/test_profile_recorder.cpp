// ProfileRecorder on synthetic tracker events: peaks per (tier, category) and per tier with the
// exact phase and unit at each, phase segments, per-unit peaks, track totals, levels carried
// across steps, and the fine-grained timeline.
#include <gtest/gtest.h>

#include "tierzero/core/error.hpp"
#include "tierzero/profile/profile_recorder.hpp"

using namespace tierzero;
using namespace tierzero::profile;

namespace {

constexpr size_t D = static_cast<size_t>(Tier::device);
constexpr size_t H = static_cast<size_t>(Tier::host);
size_t cat(Category c) {
  return static_cast<size_t>(c);
}

// One step with a forward over units 0 and 1, a backward over 1 and 0, and an optimizer phase.
void run_step(ProfileRecorder& rec, MemoryTracker& tr, ActivityLog& log) {
  rec.begin_step(0);
  rec.set_phase(Phase::forward);
  rec.set_unit(0);
  tr.on_alloc(Tier::device, Category::activation, 300);  // device 1300
  rec.set_unit(1);
  tr.on_alloc(Tier::device, Category::activation, 200);  // activation 500, device 1500
  tr.on_alloc(Tier::host, Category::io, 50);
  rec.set_phase(Phase::backward);
  tr.on_free(Tier::device, Category::activation, 200);  // 1300
  tr.on_alloc(Tier::device, Category::grad, 100);       // 1400
  rec.set_unit(0);
  tr.on_free(Tier::device, Category::activation, 300);  // 1100
  tr.on_alloc(Tier::device, Category::grad, 100);       // grad 200, device 1200
  rec.set_phase(Phase::optimizer);
  rec.set_unit(-1);
  tr.on_alloc(Tier::device, Category::optimizer, 600);  // device 1800: the tier's peak
  tr.on_free(Tier::device, Category::optimizer, 600);
  tr.on_free(Tier::device, Category::grad, 200);  // device 1000
  log.record(Track::host_to_device, "h2d", 1.0, 1.5, 4096);
  log.record(Track::collective, "all_gather", 2.0, 2.25, 1000);
  StepCounters c;
  c.prefetch_hits = 3;
  c.on_demand_fetches = 1;
  c.stall_s = 0.5;
  c.loss = 2.5;
  c.tokens = 64;
  rec.end_step(c);
}

}  // namespace

TEST(ProfileRecorder, PeaksAreAttributedToTheExactPhaseAndUnit) {
  MemoryTracker tr;
  ActivityLog log;
  tr.on_alloc(Tier::device, Category::param, 1000);  // held before recording began
  RecorderOptions o;
  o.tracker = &tr;
  o.activities = &log;
  ProfileRecorder rec(o);
  run_step(rec, tr, log);

  ASSERT_EQ(rec.profile().steps.size(), 1u);
  const StepProfile& s = rec.profile().steps[0];
  EXPECT_EQ(s.at_start[D][cat(Category::param)], 1000u);
  EXPECT_EQ(s.peak[D][cat(Category::param)].bytes, 1000u);
  EXPECT_EQ(s.peak[D][cat(Category::param)].phase, Phase::other);  // held from the start

  const PeakAt& act = s.peak[D][cat(Category::activation)];
  EXPECT_EQ(act.bytes, 500u);
  EXPECT_EQ(act.phase, Phase::forward);
  EXPECT_EQ(act.unit, 1);
  const PeakAt& grad = s.peak[D][cat(Category::grad)];
  EXPECT_EQ(grad.bytes, 200u);
  EXPECT_EQ(grad.phase, Phase::backward);
  EXPECT_EQ(grad.unit, 0);
  const PeakAt& dev = s.tier_peak[D];
  EXPECT_EQ(dev.bytes, 1800u);
  EXPECT_EQ(dev.phase, Phase::optimizer);
  EXPECT_EQ(dev.unit, -1);
  EXPECT_GT(dev.time_s, act.time_s);
  EXPECT_EQ(s.tier_peak[H].bytes, 50u);
  EXPECT_EQ(s.peak[H][cat(Category::io)].phase, Phase::forward);

  EXPECT_EQ(s.at_end[D][cat(Category::param)], 1000u);
  EXPECT_EQ(s.at_end[D][cat(Category::grad)], 0u);
  EXPECT_EQ(s.at_end[H][cat(Category::io)], 50u);

  // Phases in order: the step's start (other), forward, backward, optimizer.
  ASSERT_EQ(s.phases.size(), 4u);
  EXPECT_EQ(s.phases[0].phase, Phase::other);
  EXPECT_EQ(s.phases[1].phase, Phase::forward);
  EXPECT_EQ(s.phases[1].peak[D][cat(Category::activation)], 500u);
  EXPECT_EQ(s.phases[1].at_end[D][cat(Category::activation)], 500u);
  EXPECT_EQ(s.phases[2].phase, Phase::backward);
  EXPECT_EQ(s.phases[2].peak[D][cat(Category::activation)], 500u);  // held on entry
  EXPECT_EQ(s.phases[2].peak[D][cat(Category::grad)], 200u);
  EXPECT_EQ(s.phases[3].phase, Phase::optimizer);
  EXPECT_EQ(s.phases[3].peak[D][cat(Category::optimizer)], 600u);
  EXPECT_EQ(s.phases[3].peak[D][cat(Category::grad)], 200u);
  for (size_t i = 1; i < s.phases.size(); ++i)
    EXPECT_DOUBLE_EQ(s.phases[i].start_s, s.phases[i - 1].end_s);
  EXPECT_DOUBLE_EQ(s.phases.back().end_s, s.end_s - s.start_s);

  ASSERT_EQ(s.units.size(), 2u);
  EXPECT_EQ(s.units[0].unit, 0);
  EXPECT_EQ(s.units[0].peak[D], 1400u);  // entering backward unit 0 at 1400
  EXPECT_EQ(s.units[1].unit, 1);
  EXPECT_EQ(s.units[1].peak[D], 1500u);
  EXPECT_GT(s.units[0].seconds, 0.0);
  EXPECT_LT(s.units[0].seconds + s.units[1].seconds, s.end_s - s.start_s);

  const TrackStep& h2d = s.tracks[static_cast<size_t>(Track::host_to_device)];
  EXPECT_DOUBLE_EQ(h2d.seconds, 0.5);
  EXPECT_EQ(h2d.bytes, 4096u);
  EXPECT_EQ(h2d.count, 1u);
  EXPECT_EQ(s.tracks[static_cast<size_t>(Track::collective)].bytes, 1000u);
  EXPECT_EQ(s.tracks[static_cast<size_t>(Track::compute)].count, 0u);

  EXPECT_EQ(s.counters.prefetch_hits, 3u);
  EXPECT_GT(s.counters.step_s, 0.0);  // measured when the trainer gives 0
  EXPECT_GT(s.process_rss, 0u);
  EXPECT_GT(s.host_available, 0u);
  EXPECT_EQ(s.driver_device_used, -1);
  EXPECT_FALSE(rec.profile().has_timeline);
  EXPECT_TRUE(tr.timeline().empty());  // drained: the tracker stays bounded
  EXPECT_GT(rec.profile().run.host_total, 0u);
}

TEST(ProfileRecorder, LevelsCarryAcrossStepsAndBetweenStepEvents) {
  MemoryTracker tr;
  ActivityLog log;
  RecorderOptions o;
  o.tracker = &tr;
  o.activities = &log;
  o.driver_device_used = [] { return int64_t{12345}; };
  ProfileRecorder rec(o);
  tr.on_alloc(Tier::device, Category::param, 1000);
  run_step(rec, tr, log);
  tr.on_alloc(Tier::host, Category::workspace, 10);  // between steps
  rec.begin_step(1);
  rec.set_unit(7);
  rec.end_step({});
  const StepProfile& s = rec.profile().steps[1];
  EXPECT_EQ(s.at_start[D][cat(Category::param)], 1000u);
  EXPECT_EQ(s.at_start[H][cat(Category::workspace)], 10u);
  EXPECT_EQ(s.tier_peak[H].bytes, 60u);
  EXPECT_EQ(s.tier_peak[D].bytes, 1000u);
  ASSERT_EQ(s.units.size(), 1u);
  EXPECT_EQ(s.units[0].peak[D], 1000u);
  EXPECT_EQ(s.driver_device_used, 12345);
  EXPECT_EQ(s.tracks[static_cast<size_t>(Track::host_to_device)].count, 0u);  // a delta
}

TEST(ProfileRecorder, FineTimelineKeepsEveryEventActivityAndPosition) {
  MemoryTracker tr;
  ActivityLog log;
  tr.on_alloc(Tier::device, Category::param, 1000);
  RecorderOptions o;
  o.timeline = true;
  o.tracker = &tr;
  o.activities = &log;
  ProfileRecorder rec(o);
  EXPECT_TRUE(log.recording());
  run_step(rec, tr, log);
  const Profile& p = rec.profile();
  ASSERT_TRUE(p.has_timeline);
  EXPECT_EQ(p.timeline.initial[D][cat(Category::param)], 1000u);
  EXPECT_EQ(p.timeline.events.size(), 10u);
  ASSERT_EQ(p.timeline.activities.size(), 2u);
  EXPECT_EQ(p.timeline.activities[1].name, "all_gather");
  EXPECT_EQ(p.timeline.positions.size(), 8u);  // start + 7 changes
}

TEST(ProfileRecorder, FineTimelineStopsTheActivityRecordingItStarted) {
  MemoryTracker tr;
  ActivityLog log;
  RecorderOptions o;
  o.timeline = true;
  o.tracker = &tr;
  o.activities = &log;
  { ProfileRecorder rec(o); }
  EXPECT_FALSE(log.recording());
  log.set_recording(true);
  { ProfileRecorder rec(o); }
  EXPECT_TRUE(log.recording());  // someone else's recording stays on
}

TEST(ProfileRecorder, MisuseIsAClearError) {
  MemoryTracker tr;
  ActivityLog log;
  RecorderOptions o;
  o.tracker = &tr;
  o.activities = &log;
  ProfileRecorder rec(o);
  EXPECT_THROW(rec.end_step({}), Error);
  rec.begin_step(0);
  try {
    rec.begin_step(1);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 0 is still open"), std::string::npos) << e.what();
  }
}
