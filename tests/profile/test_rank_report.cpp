// One report over several ranks' profiles: the profiles are checked to be of one run (a mixed
// set, a rank given twice, a rank past the world size are errors naming the file; a missing
// rank is a warning), each rank's figures are its own profile's, the imbalance and the slowest
// rank follow from them, the page shows the slowest rank, and the trace holds every rank as
// its own process on the shared clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "synthetic_profile.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/profile/html_report.hpp"
#include "tierzero/profile/profile_summary.hpp"
#include "tierzero/profile/rank_comparison.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/profile/trace_export.hpp"

using namespace tierzero;
using namespace tierzero::profile;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// Every time in the profile moved by `dt` seconds.
void shift(Profile& p, double dt) {
  for (auto& s : p.steps) {
    s.start_s += dt;
    s.end_s += dt;
  }
  for (auto& e : p.timeline.events) e.time_s += dt;
  for (auto& a : p.timeline.activities) {
    a.start_s += dt;
    a.end_s += dt;
  }
  for (auto& c : p.timeline.positions) c.time_s += dt;
}

// Rank r of a `ranks`-rank run: steps (1 + r / 2) times as long, r MiB more activations on
// the device, starting r * 0.25 s later.
Profile rank_profile(int rank, int ranks, const std::string& run_id = "0123456789abcdef") {
  Profile p = synthetic::synthetic_profile(4, 3, true);
  p.run.rank = rank;
  p.run.ranks = ranks;
  p.run.run_id = run_id;
  p.run.host = "node0";
  const auto dev = static_cast<size_t>(Tier::device);
  const auto act = static_cast<size_t>(Category::activation);
  for (auto& s : p.steps) {
    s.counters.step_s *= 1.0 + 0.5 * rank;
    s.peak[dev][act].bytes += static_cast<size_t>(rank) * MiB;
    s.tier_peak[dev].bytes += static_cast<size_t>(rank) * MiB;
  }
  shift(p, 0.25 * rank);
  return p;
}

RankProfiles four_ranks() {
  // Given out of order: the check sorts them.
  std::vector<Profile> ps{rank_profile(2, 4), rank_profile(0, 4), rank_profile(3, 4),
                          rank_profile(1, 4)};
  return check_rank_profiles(std::move(ps), {"p.rank2", "p", "p.rank3", "p.rank1"});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(RankReport, FiguresAreEachRanksOwnAndTheSlowestIsFound) {
  const RankProfiles rp = four_ranks();
  ASSERT_EQ(rp.profiles.size(), 4u);
  EXPECT_TRUE(rp.missing.empty());
  EXPECT_TRUE(rp.warnings.empty());
  const RankComparison c = compare_ranks(rp);
  ASSERT_EQ(c.figures.size(), 4u);
  double sum = 0.0, top = 0.0;
  for (int r = 0; r < 4; ++r) {
    const RankFigures& f = c.figures[static_cast<size_t>(r)];
    EXPECT_EQ(f.rank, r);
    EXPECT_EQ(rp.sources[static_cast<size_t>(r)], r == 0 ? "p" : "p.rank" + std::to_string(r));
    // Straight from the profile: the highest per-step peaks and the steady steps' mean.
    const Profile& p = rp.profiles[static_cast<size_t>(r)];
    size_t dev_peak = 0, act_peak = 0;
    double mean = 0.0;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      dev_peak = std::max(dev_peak, p.steps[i].tier_peak[0].bytes);
      act_peak =
          std::max(act_peak, p.steps[i].peak[0][static_cast<size_t>(Category::activation)].bytes);
      if (i > 0) mean += p.steps[i].counters.step_s;
    }
    mean /= static_cast<double>(p.steps.size() - 1);
    std::printf("rank %d: device peak %zu (report %zu), activations %zu (%zu), step %.6f (%.6f)\n",
                r, dev_peak, f.tier_peak[0], act_peak,
                f.peak[0][static_cast<size_t>(Category::activation)], mean, f.mean_step_s);
    EXPECT_EQ(f.tier_peak[0], dev_peak);
    EXPECT_EQ(f.peak[0][static_cast<size_t>(Category::activation)], act_peak);
    EXPECT_NEAR(f.mean_step_s, mean, 1e-12 * mean);
    sum += mean;
    top = std::max(top, mean);
  }
  EXPECT_EQ(c.figures[c.slowest].rank, 3);
  EXPECT_NEAR(c.step_imbalance, top / (sum / 4.0), 1e-12);
  EXPECT_EQ(c.figures[c.largest_tier_peak[0]].rank, 3);
  EXPECT_GT(c.tier_peak_imbalance[0], 1.0);
  // Host figures are the same on every rank: balanced.
  EXPECT_DOUBLE_EQ(c.tier_peak_imbalance[static_cast<size_t>(Tier::host)], 1.0);
  const nlohmann::ordered_json j = rank_comparison_json(c);
  EXPECT_EQ(j["imbalance"]["slowest_rank"], 3);
  EXPECT_EQ(j["per_rank"][2]["peaks"]["device"]["peak"], c.figures[2].tier_peak[0]);
}

TEST(RankReport, MixedRunsDuplicatesAndStrayRanksAreErrorsNamingTheFile) {
  std::string what = error_of([] {
    check_rank_profiles({rank_profile(0, 2), rank_profile(1, 2, "ffffffffffffffff")},
                        {"a.json", "other.json.rank1"});
  });
  std::printf("%s\n", what.c_str());
  EXPECT_NE(what.find("other.json.rank1"), std::string::npos);
  EXPECT_NE(what.find("not of the same run"), std::string::npos);

  what = error_of([] {
    check_rank_profiles({rank_profile(0, 2), rank_profile(1, 4)}, {"a.json", "b.json.rank1"});
  });
  std::printf("%s\n", what.c_str());
  EXPECT_NE(what.find("b.json.rank1"), std::string::npos);

  what = error_of([] {
    check_rank_profiles({rank_profile(1, 2), rank_profile(1, 2)}, {"x.rank1", "y.rank1"});
  });
  std::printf("%s\n", what.c_str());
  EXPECT_NE(what.find("profiles 'x.rank1' and 'y.rank1' are both rank 1"), std::string::npos);

  Profile stray = rank_profile(0, 2);
  stray.run.rank = 5;
  what = error_of([&] { check_rank_profiles({rank_profile(0, 2), stray}, {"a", "stray"}); });
  std::printf("%s\n", what.c_str());
  EXPECT_NE(what.find("'stray' is rank 5 of a 2-rank run"), std::string::npos);
}

TEST(RankReport, MissingRanksAreAWarningAndShownInThePage) {
  const RankProfiles rp =
      check_rank_profiles({rank_profile(0, 4), rank_profile(2, 4)}, {"p", "p.rank2"});
  EXPECT_EQ(rp.missing, (std::vector<int>{1, 3}));
  ASSERT_EQ(rp.warnings.size(), 1u);
  std::printf("%s\n", rp.warnings[0].c_str());
  EXPECT_NE(rp.warnings[0].find("rank(s) 1, 3"), std::string::npos);
  const std::string html = render_html_report(rp);
  EXPECT_NE(html.find("id=tz-missing-ranks"), std::string::npos);
  EXPECT_NE(html.find("no profile for rank(s) 1, 3"), std::string::npos);
}

TEST(RankReport, ThePageShowsTheRanksThenTheSlowestRanksReport) {
  const RankProfiles rp = four_ranks();
  const std::string html = render_html_report(rp);
  EXPECT_NE(html.find("<h2>Ranks</h2>"), std::string::npos);
  EXPECT_NE(html.find("slowest: <b>rank 3</b>"), std::string::npos);
  EXPECT_NE(html.find("(this is rank 3)"), std::string::npos);  // the run table is rank 3's
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(html.find("<th>rank " + std::to_string(r) + "</th>"), std::string::npos);
  const std::string open = "<script type=\"application/json\" id=tz-ranks>";
  const size_t at = html.find(open);
  ASSERT_NE(at, std::string::npos);
  const size_t end = html.find("</script>", at);
  const nlohmann::json j =
      nlohmann::json::parse(html.substr(at + open.size(), end - at - open.size()));
  EXPECT_EQ(j["per_rank"].size(), 4u);
  EXPECT_EQ(j["imbalance"]["slowest_rank"], 3);
  // One profile of a one-rank run: the single-profile page, no Ranks section.
  Profile one = rank_profile(0, 1);
  const std::string single = render_html_report(check_rank_profiles({one}, {"solo.json"}));
  EXPECT_EQ(single.find("<h2>Ranks</h2>"), std::string::npos);
  EXPECT_EQ(single, render_html_report(one, "solo.json"));
}

TEST(RankReport, TheTraceHasEveryRankOnTheSharedClock) {
  const RankProfiles rp = four_ranks();
  const nlohmann::json j = nlohmann::json::parse(trace_text(rp.profiles, rp.sources));
  std::map<int64_t, std::string> names;
  std::map<int64_t, double> first_step_us;
  for (const auto& e : j["traceEvents"]) {
    const int64_t pid = e.at("pid").get<int64_t>();
    if (e["ph"] == "M" && e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["ph"] == "X" && e["cat"] == "step" && !first_step_us.count(pid))
      first_step_us[pid] = e["ts"].get<double>();
  }
  ASSERT_EQ(names.size(), 4u);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(names[r], "rank " + std::to_string(r));
    // One host: rank r started r * 0.25 s after rank 0, and the trace keeps that.
    std::printf("rank %lld: first step at %.1f us\n", static_cast<long long>(r), first_step_us[r]);
    EXPECT_NEAR(first_step_us[r] - first_step_us[0], 0.25e6 * static_cast<double>(r), 1.0);
  }
  EXPECT_EQ(j["otherData"]["ranks"].size(), 4u);
  // A rank without the timeline is named in the error.
  std::vector<Profile> ps = rp.profiles;
  ps[2].has_timeline = false;
  const std::string what = error_of([&] { (void)trace_text(ps, rp.sources); });
  EXPECT_NE(what.find("p.rank2 has no fine-grained timeline"), std::string::npos) << what;
}
