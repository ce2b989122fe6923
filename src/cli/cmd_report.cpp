// `tierzero report PROFILE -o report.html [--trace trace.json]`: turns a run profile into the
// self-contained HTML report and, when the profile holds the fine-grained timeline, a Chrome /
// Perfetto trace.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/profile/html_report.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/recommendations.hpp"
#include "tierzero/profile/trace_export.hpp"

namespace tierzero::cli {

namespace {

struct ReportFlags {
  std::string profile;
  std::string output = "report.html";
  std::string trace;
};

int run_report(const ReportFlags& f) {
  Timer timer;
  const profile::Profile p = profile::read_profile(f.profile);
  // The trace is checked first: a profile without a timeline should fail before any file is
  // written, so a half-done command leaves nothing behind.
  if (!f.trace.empty()) profile::write_trace(p, f.trace, "profile '" + f.profile + "'");
  profile::write_html_report(p, f.output, std::filesystem::path(f.profile).filename().string());
  std::fprintf(stderr, "wrote %s (%zu steps) in %.2f s\n", f.output.c_str(), p.steps.size(),
               timer.seconds());
  if (!f.trace.empty())
    std::fprintf(stderr, "wrote %s: open it in ui.perfetto.dev or chrome://tracing\n",
                 f.trace.c_str());
  for (const auto& r : profile::recommend(p)) std::fprintf(stderr, "- %s\n", r.text.c_str());
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* sub = app.add_subcommand(
      "report", "turn a run profile into an HTML report (and a Chrome/Perfetto trace)");
  sub->add_option("profile", flags->profile, "profile JSON written by a training run")->required();
  sub->add_option("-o,--output", flags->output, "the HTML report to write")->capture_default_str();
  sub->add_option("--trace", flags->trace,
                  "also write a Chrome/Perfetto trace (needs the fine-grained timeline)");
  return {sub, [flags] { return run_report(*flags); }};
}

}  // namespace tierzero::cli
