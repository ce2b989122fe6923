// Trace export: the written JSON parses, names every activity track (and the step and phase
// tracks) as threads of the rank's process, holds complete events on each track and memory
// counters for every tier; a profile without the timeline is a clear error with the fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "scratch_dir.hpp"
#include "synthetic_profile.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/profile/profile_recorder.hpp"
#include "tierzero/profile/trace_export.hpp"

using namespace tierzero;
using namespace tierzero::profile;

TEST(TraceExport, ParsesAndHoldsEveryTrackAndTheMemoryCounters) {
  const Profile p = synthetic::synthetic_profile(3, 4, true);
  const auto path =
      std::filesystem::path(tierzero::testing::scratch_dir("tz_trace")) / "trace.json";
  write_trace(p, path.string());
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);  // throws (fails the test) if invalid
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<int64_t, std::string> threads;
  std::map<std::string, size_t> slices_per_thread, counters;
  std::set<int64_t> pids;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e.at("ph");
    pids.insert(e.at("pid").get<int64_t>());
    if (ph == "M" && e["name"] == "thread_name") threads[e["tid"]] = e["args"]["name"];
    if (ph == "X") {
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      ++slices_per_thread[threads.at(e.at("tid").get<int64_t>())];
    }
    if (ph == "C") {
      ++counters[e.at("name")];
      EXPECT_EQ(e.at("args").size(), kNumCategories);
    }
  }
  EXPECT_EQ(pids, std::set<int64_t>{1});  // pid = rank
  for (size_t t = 0; t < kNumTracks; ++t) {
    const std::string name = track_name(static_cast<Track>(t));
    EXPECT_EQ(threads[static_cast<int64_t>(t) + 1], name);
    EXPECT_GT(slices_per_thread[name], 0u) << "no activity on track " << name;
  }
  EXPECT_EQ(slices_per_thread["step"], 3u);
  EXPECT_GT(slices_per_thread["phase / unit"], 0u);
  for (const char* tier : {"memory device", "memory host", "memory nvme"})
    EXPECT_GT(counters[tier], 0u) << tier;
  EXPECT_EQ(counters["memory device"] + counters["memory host"] + counters["memory nvme"],
            p.timeline.events.size() + kNumTiers);
  std::filesystem::remove(path);
}

TEST(TraceExport, RecordedProfileExportsToo) {
  MemoryTracker tr;
  ActivityLog log;
  RecorderOptions o;
  o.timeline = true;
  o.tracker = &tr;
  o.activities = &log;
  ProfileRecorder rec(o);
  rec.begin_step(0);
  rec.set_phase(Phase::forward);
  { ActivityScope scope(Track::compute, "forward", 0, 0, log); }
  tr.on_alloc(Tier::device, Category::activation, 64);
  rec.end_step({});
  const nlohmann::json j = trace_json(rec.profile());
  size_t compute = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "compute" && e["name"] == "forward") ++compute;
  EXPECT_EQ(compute, 1u);
}

TEST(TraceExport, WithoutTimelineIsAClearError) {
  const Profile p = synthetic::synthetic_profile(2, 2, false);
  try {
    trace_json(p, "profile 'run.json'");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("error: %s\n", msg.c_str());
    EXPECT_NE(msg.find("run.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fine-grained timeline"), std::string::npos) << msg;
  }
}
