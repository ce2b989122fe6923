// `tierzero report` end to end: a profile with the fine timeline gives the HTML report and the
// trace; one without it asked for a trace fails with one clear line and writes nothing; a
// missing profile names the file. Several ranks: one rank's path or the directory brings the
// run's others, the trace holds every rank, a missing rank is a warning, and profiles of
// different runs or a damaged one are errors naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli_runner.hpp"
#include "scratch_dir.hpp"
#include "synthetic_profile.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/rank_profiles.hpp"

namespace fs = std::filesystem;
using namespace tierzero::profile;

namespace {

using tierzero::test::RunResult;

RunResult tierzero_cli(const std::string& args) {
  return tierzero::test::run_tierzero(args);
}

fs::path dir() {
  return tierzero::testing::scratch_dir("tz_report_cli");
}

}  // namespace

TEST(ReportCli, WritesTheReportAndTheTrace) {
  const fs::path profile = dir() / "fine.json";
  write_profile(synthetic::synthetic_profile(4, 6, true), profile.string());
  const fs::path html = dir() / "fine.html", trace = dir() / "fine.trace.json";
  const RunResult r = tierzero_cli("report " + profile.string() + " -o " + html.string() +
                                   " --trace " + trace.string());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(fs::exists(html) && fs::file_size(html) > 1000);
  EXPECT_TRUE(fs::exists(trace) && fs::file_size(trace) > 1000);
  EXPECT_NE(r.output.find("ui.perfetto.dev"), std::string::npos);
}

TEST(ReportCli, TraceWithoutTimelineAndMissingProfileAreClearErrors) {
  const fs::path profile = dir() / "aggregated.json";
  write_profile(synthetic::synthetic_profile(2, 2, false), profile.string());
  const fs::path html = dir() / "aggregated.html";
  RunResult r = tierzero_cli("report " + profile.string() + " -o " + html.string() + " --trace " +
                             (dir() / "t.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tierzero: error: "), std::string::npos);
  EXPECT_NE(r.output.find("aggregated.json"), std::string::npos);
  EXPECT_NE(r.output.find("fine-grained timeline"), std::string::npos);
  EXPECT_FALSE(fs::exists(html));

  r = tierzero_cli("report " + (dir() / "nope.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot read profile"), std::string::npos);
  EXPECT_NE(r.output.find("nope.json"), std::string::npos);
}

namespace {

// Rank `rank` of a `ranks`-rank run `run_id`, written where the trainer would put it for
// `base`.
void write_rank(const fs::path& base, int rank, int ranks, const std::string& run_id,
                double slower = 1.0) {
  Profile p = synthetic::synthetic_profile(3, 2, true);
  p.run.rank = rank;
  p.run.ranks = ranks;
  p.run.run_id = run_id;
  for (auto& s : p.steps) s.counters.step_s *= slower;
  write_profile(p, rank_profile_path(base.string(), rank));
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(ReportCli, OneRanksPathBringsTheOthersAndTheTraceHasEveryRank) {
  const fs::path run = dir() / "three";
  fs::create_directories(run);
  for (int r = 0; r < 3; ++r)
    write_rank(run / "p.json", r, 3, "aaaa000000000001", r == 1 ? 3.0 : 1.0);
  std::ofstream(run / "c.json") << "{\"train_micro_batch_size_per_gpu\": 1}\n";  // not a profile
  const fs::path html = dir() / "three.html", trace = dir() / "three.trace.json",
                 ranks = dir() / "three.ranks.json";
  // Any rank's path finds the others.
  RunResult r = tierzero_cli("report " + (run / "p.json.rank2").string() + " -o " + html.string() +
                             " --trace " + trace.string() + " --ranks-json " + ranks.string());
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("3 rank(s) of 3"), std::string::npos);
  EXPECT_NE(r.output.find("slowest: rank 1"), std::string::npos);
  const nlohmann::json j = read_json(ranks);
  ASSERT_EQ(j["per_rank"].size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(j["per_rank"][k]["rank"], k);
    EXPECT_EQ(j["per_rank"][k]["source"], rank_profile_path((run / "p.json").string(), k));
  }
  EXPECT_EQ(j["imbalance"]["slowest_rank"], 1);
  std::set<int64_t> pids;
  const nlohmann::json events = read_json(trace)["traceEvents"];
  for (const auto& e : events)
    if (e["ph"] == "M" && e["name"] == "process_name") pids.insert(e["pid"].get<int64_t>());
  EXPECT_EQ(pids, (std::set<int64_t>{0, 1, 2}));

  // The directory stands for its profiles (the config beside them is skipped).
  r = tierzero_cli("report " + run.string() + " -o " + html.string() + " --ranks-json " +
                   ranks.string());
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(read_json(ranks)["per_rank"].size(), 3u);

  // A missing rank: a warning, and the report covers the others.
  fs::remove(run / "p.json.rank2");
  r = tierzero_cli("report " + (run / "p.json").string() + " -o " + html.string());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("warning: 1 of the run's 3 ranks have no profile here (rank(s) 2)"),
            std::string::npos);
}

TEST(ReportCli, ProfilesOfDifferentRunsAndADamagedProfileAreErrorsNamingTheFile) {
  const fs::path a = dir() / "runa" / "p.json", b = dir() / "runb" / "p.json";
  fs::create_directories(a.parent_path());
  fs::create_directories(b.parent_path());
  write_rank(a, 0, 2, "aaaa000000000002");
  write_rank(a, 1, 2, "aaaa000000000002");
  write_rank(b, 1, 2, "bbbb000000000002");
  const fs::path html = dir() / "mixed.html";
  RunResult r = tierzero_cli("report " + a.string() + " " + rank_profile_path(b.string(), 1) +
                             " -o " + html.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("runb/p.json.rank1"), std::string::npos);
  EXPECT_NE(r.output.find("not of the same run"), std::string::npos);
  EXPECT_FALSE(fs::exists(html));

  // Rank 1's file cut short: the error names it.
  const std::string rank1 = rank_profile_path(a.string(), 1);
  const auto size = fs::file_size(rank1);
  fs::resize_file(rank1, size / 2);
  r = tierzero_cli("report " + a.string() + " -o " + html.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("'" + rank1 + "' is not valid JSON"), std::string::npos);
  EXPECT_FALSE(fs::exists(html));
}
