// `tierzero report` end to end: a profile with the fine timeline gives the HTML report and the
// trace; one without it asked for a trace fails with one clear line and writes nothing; a
// missing profile names the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "synthetic_profile.hpp"
#include "tierzero/profile/profile_json.hpp"

namespace fs = std::filesystem;
using namespace tierzero::profile;

namespace {

struct RunResult {
  int exit_code;
  std::string output;
};

RunResult tierzero_cli(const std::string& args) {
  const std::string cmd = std::string(TIERZERO_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  RunResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
  std::printf("$ tierzero %s\n-> exit %d\n%s", args.c_str(), r.exit_code, out.c_str());
  return r;
}

fs::path dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("tz_report_cli_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
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
