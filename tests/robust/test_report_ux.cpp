// The report's time per activity means something (issue 29): each activity's busy time is the
// union of its intervals (transfers on several threads at once count once), no share of the
// step exceeds 100%, compute is attributed even where no compute activities were recorded, and
// a one-rank run shows no network traffic.
#include <gtest/gtest.h>
#include <algorithm>

#include <regex>
#include <string>

#include "synthetic_profile.hpp"
#include "tierzero/core/activity_log.hpp"
#include "tierzero/profile/html_report.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/profile_summary.hpp"

namespace tz = tierzero;
using tz::Track;
using namespace tierzero::profile;

namespace {

constexpr auto kCollective = static_cast<size_t>(Track::collective);
constexpr auto kNvmeRead = static_cast<size_t>(Track::nvme_read);
constexpr auto kCompute = static_cast<size_t>(Track::compute);

// The "Time per activity" section of a report, up to the next heading.
std::string activity_section(const std::string& html) {
  const size_t at = html.find("<h2>Time per activity</h2>");
  EXPECT_NE(at, std::string::npos);
  return html.substr(at, html.find("<h2>", at + 10) - at);
}

// Every "NN.N%" in the text.
std::vector<double> percentages(const std::string& text) {
  std::vector<double> out;
  const std::regex pct("([0-9]+\\.[0-9])%");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pct); it != std::sregex_iterator();
       ++it)
    out.push_back(std::stod((*it)[1].str()));
  return out;
}

// A profile whose NVMe reads and collectives ran on several threads at once: their summed
// seconds exceed the step, their busy time does not; compute was not recorded.
Profile overlapping_profile(int ranks) {
  Profile p = synthetic::synthetic_profile(4, 6, false);
  p.run.ranks = ranks;
  p.run.rank = std::min(p.run.rank, ranks - 1);  // the reader refuses a rank beyond the run's
  for (StepProfile& st : p.steps) {
    const double step = st.counters.step_s;
    st.tracks[kCollective].seconds = 1.206 * step;
    st.tracks[kCollective].busy_s = 0.7 * step;
    st.tracks[kNvmeRead].seconds = 1.04 * step;
    st.tracks[kNvmeRead].busy_s = 0.6 * step;
    st.tracks[kCompute] = {};
  }
  return p;
}

}  // namespace

TEST(ActivityBusyTime, OverlappingIntervalsCountOnce) {
  tz::ActivityLog log;
  log.record(Track::nvme_read, "a", 10.0, 12.0, 100);
  log.record(Track::nvme_read, "b", 11.0, 13.0, 100);   // overlaps a by 1 s
  log.record(Track::nvme_read, "c", 11.5, 12.5, 100);   // inside what is counted
  log.record(Track::nvme_read, "d", 20.0, 21.0, 100);   // after a gap
  log.record(Track::collective, "e", 10.0, 30.0, 100);  // another track: its own
  const auto t = log.totals();
  EXPECT_DOUBLE_EQ(t[kNvmeRead].seconds, 6.0);
  EXPECT_DOUBLE_EQ(t[kNvmeRead].busy_s, 4.0);  // [10, 13] and [20, 21]
  EXPECT_DOUBLE_EQ(t[kCollective].busy_s, 20.0);
  log.reset();
  log.record(Track::nvme_read, "f", 1.0, 2.0);
  EXPECT_DOUBLE_EQ(log.totals()[kNvmeRead].busy_s, 1.0);
}

TEST(ReportTimePerActivity, SharesStayWithinTheStepAndComputeIsAttributed) {
  const Profile p = overlapping_profile(1);
  const ProfileSummary s = summarize(p);
  for (size_t t = 0; t < tz::kNumTracks; ++t)
    EXPECT_LE(s.track_per_step[t].busy_s, s.mean_step_s + 1e-12) << tz::track_name(Track(t));
  EXPECT_TRUE(s.compute_from_phases);
  EXPECT_GT(s.compute_s, 0.0);
  EXPECT_LE(s.compute_s, s.mean_step_s);
  const std::string section = activity_section(render_html_report(p));
  std::printf("%s\n", section.c_str());
  const std::vector<double> shares = percentages(section);
  ASSERT_FALSE(shares.empty());
  for (double v : shares) EXPECT_LE(v, 100.0);
  const size_t compute = section.find("compute (forward + backward less waits)");
  ASSERT_NE(compute, std::string::npos);
  const std::vector<double> compute_share =
      percentages(section.substr(compute, section.find("</tr>", compute) - compute));
  ASSERT_EQ(compute_share.size(), 1u);
  EXPECT_GT(compute_share[0], 0.0);
  // One rank: its collectives are local copies, and no link carries network traffic.
  EXPECT_NE(section.find("none: one rank"), std::string::npos);
}

TEST(ReportTimePerActivity, SeveralRanksShowTheNetwork) {
  const std::string section = activity_section(render_html_report(overlapping_profile(2)));
  EXPECT_EQ(section.find("none: one rank"), std::string::npos);
  EXPECT_NE(section.find("network (collectives)"), std::string::npos);
  for (double v : percentages(section)) EXPECT_LE(v, 100.0);
}

// Profiles written before busy time was recorded read their summed seconds as busy, and the
// report still bounds the share by the step.
TEST(ReportTimePerActivity, OldProfilesReadAndStayBounded) {
  const Profile p = overlapping_profile(1);
  nlohmann::json j = profile_to_json(p);
  for (auto& step : j.at("steps"))
    for (auto& track : step.at("tracks")) track.erase(3);
  const Profile old = profile_from_json(j);
  EXPECT_DOUBLE_EQ(old.steps[1].tracks[kCollective].busy_s, p.steps[1].tracks[kCollective].seconds);
  for (double v : percentages(activity_section(render_html_report(old)))) EXPECT_LE(v, 100.0);
}
