// Recommendations from crafted numbers: each rule fires when its numbers say so, with the
// figures in its sentence, and stays quiet when they do not.
#include <gtest/gtest.h>

#include <algorithm>

#include "tierzero/profile/recommendations.hpp"

using namespace tierzero;
using namespace tierzero::profile;

namespace {

constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;
constexpr size_t D = 0, H = 1, N = 2;
constexpr size_t PARAM = 0, OPT = 2, IO = 5;

// Two steps of `step_s` seconds with `stall_s` of stalls; optimizer states on NVMe.
Profile crafted(double step_s, double stall_s) {
  Profile p;
  p.run.device = "cuda:0";
  p.run.device_budget = 10 * GiB;
  p.run.host_available = 14 * GiB;
  p.placements = {{"block 0", 1000, "device", "device", "nvme"},
                  {"block 1", 1000, "device", "device", "nvme"}};
  for (int64_t i = 0; i < 2; ++i) {
    StepProfile s;
    s.step = i;
    s.counters.step_s = step_s;
    s.counters.stall_s = stall_s;
    s.counters.prefetch_hits = 10;
    s.counters.on_demand_fetches = 1;
    s.tier_peak[D].bytes = 7 * GiB;
    s.peak[D][PARAM].bytes = 7 * GiB;
    s.peak[N][OPT].bytes = 6 * GiB;
    s.tier_peak[N].bytes = 6 * GiB;
    p.steps.push_back(s);
  }
  return p;
}

const Recommendation* find(const std::vector<Recommendation>& recs, const std::string& id) {
  auto it =
      std::find_if(recs.begin(), recs.end(), [&](const Recommendation& r) { return r.id == id; });
  return it == recs.end() ? nullptr : &*it;
}

void print(const std::vector<Recommendation>& recs) {
  for (const auto& r : recs) std::printf("  [%s] %s\n", r.id.c_str(), r.text.c_str());
}

}  // namespace

TEST(Recommendations, QuietWhenNothingStandsOut) {
  const auto recs = recommend(crafted(2.0, 0.01));
  print(recs);
  EXPECT_TRUE(recs.empty());
  EXPECT_TRUE(recommend(Profile{}).empty());
}

TEST(Recommendations, OptimizerOnNvmeWithStallsAndRoomOnHost) {
  const auto recs = recommend(crafted(4.0, 1.8));
  print(recs);
  const Recommendation* r = find(recs, "optimizer_nvme_to_host");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("1.80 s of stalls per step"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("14.0 GiB of free host memory"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("(6.0 GiB)"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("offload_optimizer.device = cpu"), std::string::npos) << r->text;
  EXPECT_EQ(find(recs, "stalls_dominate"), nullptr);  // the specific advice replaces the generic

  Profile small_host = crafted(4.0, 1.8);
  small_host.run.host_available = 6 * GiB;  // 6 GiB needed, 80% of 6 GiB usable: no
  const auto none = recommend(small_host);
  print(none);
  EXPECT_EQ(find(none, "optimizer_nvme_to_host"), nullptr);
  EXPECT_NE(find(none, "stalls_dominate"), nullptr);

  // What is free while the run holds its states counts, not what was free before it began.
  Profile later = crafted(4.0, 1.8);
  later.steps[1].host_available = 5 * GiB;
  EXPECT_EQ(find(recommend(later), "optimizer_nvme_to_host"), nullptr);
  later.steps[1].host_available = 10 * GiB;
  const auto recs_later = recommend(later);
  ASSERT_NE(find(recs_later, "optimizer_nvme_to_host"), nullptr);
  EXPECT_NE(find(recs_later, "optimizer_nvme_to_host")->text.find("10.0 GiB of free host"),
            std::string::npos);
}

TEST(Recommendations, PrefetchNeverHitAndLowHitRate) {
  Profile p = crafted(2.0, 0.0);
  for (auto& s : p.steps) {
    s.counters.prefetch_hits = 0;
    s.counters.on_demand_fetches = 24;
  }
  p.steps[0].counters.prefetch_hits = 5;  // the first step is warm-up and does not count
  auto recs = recommend(p);
  print(recs);
  const Recommendation* r = find(recs, "prefetch_never_hit");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("24 on-demand fetches in 1 steps"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("stage3_prefetch_bucket_size"), std::string::npos);

  p.steps[1].counters.prefetch_hits = 6;
  recs = recommend(p);
  print(recs);
  EXPECT_EQ(find(recs, "prefetch_never_hit"), nullptr);
  ASSERT_NE(find(recs, "prefetch_low_hit_rate"), nullptr);
  EXPECT_NE(find(recs, "prefetch_low_hit_rate")->text.find("20% of 30"), std::string::npos);
}

TEST(Recommendations, UnaccountedDeviceAndHostBytes) {
  Profile p = crafted(2.0, 0.0);
  for (auto& s : p.steps) {
    s.at_end[D][PARAM] = 7 * GiB;
    s.driver_device_used = static_cast<int64_t>(9 * GiB);  // 2 GiB nobody tracked
    s.process_rss = 3 * GiB;
    s.at_end[H][OPT] = 1 * GiB;
  }
  auto recs = recommend(p);
  print(recs);
  const Recommendation* r = find(recs, "unaccounted_device");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("2.0 GiB of device memory are not accounted for"), std::string::npos)
      << r->text;
  r = find(recs, "unaccounted_host");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("2.0 GiB of process memory"), std::string::npos) << r->text;

  for (auto& s : p.steps) {
    s.driver_device_used = static_cast<int64_t>(7 * GiB + 100 * MiB);  // small runtime overhead
    s.process_rss = 1 * GiB + 100 * MiB;
  }
  recs = recommend(p);
  print(recs);
  EXPECT_EQ(find(recs, "unaccounted_device"), nullptr);
  EXPECT_EQ(find(recs, "unaccounted_host"), nullptr);

  // On the CPU backend device bytes live in the process too.
  p.run.device = "cpu";
  for (auto& s : p.steps) {
    s.driver_device_used = -1;
    s.process_rss = 8 * GiB + 100 * MiB;
  }
  recs = recommend(p);
  print(recs);
  EXPECT_EQ(find(recs, "unaccounted_host"), nullptr);
}

TEST(Recommendations, DeviceBudgetUseAndPredictionMisses) {
  Profile p = crafted(2.0, 0.0);
  for (auto& s : p.steps) s.tier_peak[D].bytes = 4 * GiB;
  auto recs = recommend(p);
  print(recs);
  const Recommendation* r = find(recs, "device_underused");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("device peak is 40% of the budget"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("a larger micro-batch would fit"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("keep more states on the device"), std::string::npos) << r->text;

  for (auto& s : p.steps) s.tier_peak[D].bytes = 9 * GiB + 900 * MiB;
  recs = recommend(p);
  print(recs);
  EXPECT_NE(find(recs, "device_near_budget"), nullptr);
  EXPECT_EQ(find(recs, "device_underused"), nullptr);

  p.has_predicted = true;
  p.predicted[D][PARAM] = 7 * GiB + 100 * MiB;  // within 10%: fine
  p.predicted[N][OPT] = 6 * GiB;
  recs = recommend(p);
  EXPECT_EQ(find(recs, "prediction_off"), nullptr);
  p.predicted[D][PARAM] = 5 * GiB;  // measured 7 GiB: +40%
  recs = recommend(p);
  print(recs);
  r = find(recs, "prediction_off");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("measured device param peak (7.0 GiB)"), std::string::npos) << r->text;
  EXPECT_NE(r->text.find("+40%"), std::string::npos) << r->text;
  // io and comm predictions are upper bounds: measuring less is no finding, more is.
  p.predicted[D][PARAM] = 7 * GiB;
  for (auto& s : p.steps) s.peak[H][IO].bytes = GiB;
  p.predicted[H][IO] = 3 * GiB;  // measured 1 GiB
  recs = recommend(p);
  EXPECT_EQ(find(recs, "prediction_off"), nullptr);
  p.predicted[H][IO] = 512 * MiB;
  recs = recommend(p);
  r = find(recs, "prediction_off");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->text.find("host io"), std::string::npos) << r->text;
}
