// The profile JSON: write -> read gives the same profile (with and without the timeline), and a
// missing, corrupt, foreign or damaged file gives an Error naming the file and what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/profile_recorder.hpp"

using namespace tierzero;
using namespace tierzero::profile;

namespace {

std::string temp_path(const std::string& name) {
  return tierzero::testing::scratch_dir("tz_profile_json") + "/" + name;
}

Profile recorded_profile(bool timeline) {
  MemoryTracker tr;
  ActivityLog log;
  RecorderOptions o;
  o.timeline = timeline;
  o.tracker = &tr;
  o.activities = &log;
  ProfileRecorder rec(o);
  RunInfo run;
  run.model = "gpt2 \"tiny\"";
  run.parameters = 123456;
  run.ranks = 2;
  run.stage = 3;
  run.device = "cpu";
  run.device_budget = size_t{1} << 30;
  run.extra["micro_batch"] = "4";
  rec.set_run_info(run);
  rec.set_placements({{"embeddings", 1000, "device", "device", "host"},
                      {"block 0", 4000, "host", "host", "nvme"}});
  TierCategoryBytes predicted{};
  predicted[0][0] = 2000;
  predicted[2][2] = 48000;
  rec.set_predicted(predicted);
  for (int64_t step = 0; step < 3; ++step) {
    rec.begin_step(step);
    rec.set_phase(Phase::forward);
    rec.set_unit(0);
    tr.on_alloc(Tier::device, Category::activation, 100, "acts");
    rec.set_phase(Phase::backward);
    tr.on_free(Tier::device, Category::activation, 100, "acts");
    log.record(Track::nvme_read, "read", 0.25, 0.5, 512, 0);
    StepCounters c;
    c.loss = 1.0 / 3.0;  // not exactly representable in decimal: must still round-trip
    c.stall_s = 0.1 * static_cast<double>(step);
    c.reductions = static_cast<size_t>(step) + 2;  // the gradient reductions' counters too
    c.reduction_s = 0.3 / 7.0;
    c.reduction_exposed_s = 0.1 / 7.0;
    rec.end_step(c);
  }
  return rec.profile();
}

void expect_error(const std::string& path, const std::string& needle) {
  try {
    read_profile(path);
    FAIL() << "expected an Error reading " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("error: %s\n", msg.c_str());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

}  // namespace

TEST(ProfileJson, RoundTripIsExact) {
  for (bool timeline : {false, true}) {
    const Profile p = recorded_profile(timeline);
    const std::string path = temp_path(timeline ? "fine.json" : "agg.json");
    write_profile(p, path);
    const Profile q = read_profile(path);
    EXPECT_EQ(q.steps.size(), 3u);
    EXPECT_EQ(q.has_timeline, timeline);
    EXPECT_TRUE(p == q) << "profile changed in a write/read round trip (timeline " << timeline
                        << ")";
  }
}

TEST(ProfileJson, BadFilesGiveClearErrors) {
  expect_error(temp_path("missing.json"), "cannot read profile");

  const std::string good = temp_path("good.json");
  write_profile(recorded_profile(false), good);
  std::ifstream in(good);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const std::string truncated = temp_path("truncated.json");
  std::ofstream(truncated) << text.substr(0, text.size() / 2);
  expect_error(truncated, "not valid JSON");

  const std::string foreign = temp_path("foreign.json");
  std::ofstream(foreign) << R"({"traceEvents": []})";
  expect_error(foreign, "not a TierZero profile");

  const std::string wrong_format = temp_path("wrong_format.json");
  std::ofstream(wrong_format) << R"({"format": "pytorch-snapshot", "version": 1})";
  expect_error(wrong_format, "pytorch-snapshot");

  auto j = nlohmann::json::parse(text);
  j["version"] = 99;
  const std::string future = temp_path("future.json");
  std::ofstream(future) << j.dump();
  expect_error(future, "version 99");

  j = nlohmann::json::parse(text);
  j["steps"][1].erase("counters");
  const std::string damaged = temp_path("damaged.json");
  std::ofstream(damaged) << j.dump();
  expect_error(damaged, "steps[1]");
}

TEST(ProfileJson, ProfilesWithoutReductionCountersReadAsZero) {
  // Profiles written before the gradient reductions were timed lack their three counters.
  const std::string path = temp_path("old.json");
  write_profile(recorded_profile(false), path);
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["steps"][0]["counters"]["reductions"].get<size_t>(), 2u);
  for (auto& step : j["steps"])
    for (const char* key : {"reductions", "reduction_s", "reduction_exposed_s"})
      step["counters"].erase(key);
  const std::string old = temp_path("old_stripped.json");
  std::ofstream(old) << j.dump();
  const Profile q = read_profile(old);
  ASSERT_EQ(q.steps.size(), 3u);
  for (const StepProfile& s : q.steps) {
    EXPECT_EQ(s.counters.reductions, 0u);
    EXPECT_EQ(s.counters.reduction_s, 0.0);
    EXPECT_EQ(s.counters.reduction_exposed_s, 0.0);
  }
}
