// `tierzero report PROFILE... -o report.html [--trace trace.json] [--ranks-json ranks.json]`:
// turns a run's profiles into the self-contained HTML report and, when they hold the
// fine-grained timeline, a Chrome / Perfetto trace. Given one rank's profile of a multi-rank run
// it finds the others by the trainer's naming (FILE, FILE.rank<r>); a directory stands for the
// profiles in it. Several ranks give one report: the ranks side by side, then the slowest one's.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/profile/html_report.hpp"
#include "tierzero/profile/rank_comparison.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/profile/recommendations.hpp"
#include "tierzero/profile/trace_export.hpp"
#include "tierzero/train/output_paths.hpp"

namespace tierzero::cli {

namespace {

struct ReportFlags {
  std::vector<std::string> profiles;
  std::string output = "report.html";
  std::string trace;
  std::string ranks_json;
};

void write_json_file(const nlohmann::ordered_json& j, const std::string& path) {
  write_file_atomic(path, j.dump(2) + "\n");
}

// Before anything is read or written: no output is a profile read, inside a checkpoint, or
// another output, and every output's directory takes a new file.
void check_outputs(const ReportFlags& f, const std::vector<std::string>& inputs) {
  std::vector<std::pair<std::string, std::string>> outputs = {{"-o", f.output}};
  if (!f.trace.empty()) outputs.emplace_back("--trace", f.trace);
  if (!f.ranks_json.empty()) outputs.emplace_back("--ranks-json", f.ranks_json);
  train::check_distinct_outputs(outputs);
  for (const auto& [flag, path] : outputs) train::check_output_file(flag, path, inputs);
}

int run_report(const ReportFlags& f) {
  Timer timer;
  check_outputs(f, f.profiles);
  const profile::RankProfiles rp = profile::read_rank_profiles(f.profiles);
  check_outputs(f, rp.sources);  // the ranks' files found beside the ones named
  for (const std::string& w : rp.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // The trace is made first: profiles without a timeline should fail before any file is
  // written, so a half-done command leaves nothing behind.
  std::string trace;
  if (!f.trace.empty()) trace = profile::trace_text(rp.profiles, rp.sources);
  const profile::RankComparison c = profile::compare_ranks(rp);
  profile::write_html_report(rp, f.output);
  if (!trace.empty()) profile::write_trace_text(trace, f.trace);
  if (!f.ranks_json.empty()) write_json_file(profile::rank_comparison_json(c), f.ranks_json);
  const profile::Profile& shown = rp.profiles[c.slowest];
  std::fprintf(stderr, "wrote %s (%zu rank(s) of %d, %zu steps) in %.2f s\n", f.output.c_str(),
               rp.profiles.size(), rp.ranks, shown.steps.size(), timer.seconds());
  if (rp.profiles.size() > 1)
    std::fprintf(stderr,
                 "slowest: rank %d (%.4f s per step, %.3f x the mean); device peak max/mean "
                 "%.3f\n",
                 shown.run.rank, c.figures[c.slowest].mean_step_s, c.step_imbalance,
                 c.tier_peak_imbalance[static_cast<size_t>(Tier::device)]);
  if (!f.trace.empty())
    std::fprintf(stderr, "wrote %s: open it in ui.perfetto.dev or chrome://tracing\n",
                 f.trace.c_str());
  if (!f.ranks_json.empty()) std::fprintf(stderr, "wrote %s\n", f.ranks_json.c_str());
  for (const auto& r : profile::recommend(shown)) std::fprintf(stderr, "- %s\n", r.text.c_str());
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* sub = app.add_subcommand(
      "report", "turn a run's profiles into an HTML report (and a Chrome/Perfetto trace)");
  sub->add_option("profiles", flags->profiles,
                  "profile JSON a training run wrote: one rank's file (the run's other ranks, "
                  "FILE.rank<r>, are found beside it), several files, or a directory of them")
      ->required();
  sub->add_option("-o,--output", flags->output, "the HTML report to write")->capture_default_str();
  sub->add_option("--trace", flags->trace,
                  "also write a Chrome/Perfetto trace, one process per rank (needs the "
                  "fine-grained timeline)");
  sub->add_option("--ranks-json", flags->ranks_json,
                  "also write the per-rank figures and their imbalance as JSON");
  return {sub, [flags] { return run_report(*flags); }};
}

}  // namespace tierzero::cli
