// The tierzero binary: parses the command line, runs one subcommand, and turns any Error into
// one clear line on stderr and a non-zero exit (the source location only with --log-level debug;
// an error every rank raises alike printed once, by rank 0).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <ostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tierzero/core/error_report.hpp"
#include "tierzero/core/log.hpp"

#ifndef TIERZERO_VERSION
#define TIERZERO_VERSION "unknown"
#endif

namespace {

// Edit distance between two short words (the subcommand names), for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The first word that is not an option, when it names no subcommand: one error line suggesting
// the nearest command (CLI11 alone would say only that a subcommand is required). Returns the
// exit code, or -1 when the command line names a subcommand (or none at all).
int reject_unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return -1;
  const std::string word = argv[1];
  std::string nearest;
  size_t best = 0;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return -1;
    const size_t d = edit_distance(word, sub->get_name());
    if (nearest.empty() || d < best) {
      nearest = sub->get_name();
      best = d;
    }
  }
  std::string line = "tierzero: error: unknown command '" + word + "'";
  if (!nearest.empty() && best <= std::max<size_t>(2, word.size() / 3))
    line += "; did you mean '" + nearest + "'?";
  // Under mpiexec every rank reads the same line: one of them says what is wrong.
  if (tierzero::process_rank() == 0)
    std::fprintf(stderr, "%s (run `tierzero --help` for the list)\n", line.c_str());
  return 2;
}

// --log-level is read before the subcommand runs so that an error raised while the configuration
// is read already shows its source location at debug.
void apply_log_level(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string value;
    if (std::strcmp(argv[i], "--log-level") == 0 && i + 1 < argc)
      value = argv[i + 1];
    else if (std::strncmp(argv[i], "--log-level=", 12) == 0)
      value = argv[i] + 12;
    if (value.empty()) continue;
    try {
      tierzero::log::set_level(tierzero::log::level_from_name(value));
    } catch (const tierzero::Error&) {
      // the subcommand reports the bad name itself
    }
  }
}

// Prints the error, once for an error every rank raised alike (from rank 0, without a rank).
void print_error(const std::exception& e) {
  const auto* same = dynamic_cast<const tierzero::SameOnEveryRankError*>(&e);
  if (same == nullptr) {
    std::fprintf(stderr, "tierzero: error: %s\n", tierzero::user_message(e).c_str());
    return;
  }
  if (!same->reports()) return;
  std::string line = same->what_failed();
  if (tierzero::log::level() == tierzero::log::Level::debug && !same->where().empty())
    line += " [at " + same->where() + "]";
  if (!same->hint().empty()) line += " (hint: " + same->hint() + ")";
  std::fprintf(stderr, "tierzero: error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TierZero: train GPT models larger than your accelerator's memory"};
  app.set_version_flag("--version", std::string("tierzero ") + TIERZERO_VERSION);
  app.require_subcommand(1);
  std::vector<tierzero::cli::Command> commands = {
      tierzero::cli::add_train_command(app),        tierzero::cli::add_eval_command(app),
      tierzero::cli::add_prepare_data_command(app), tierzero::cli::add_bench_command(app),
      tierzero::cli::add_estimate_command(app),     tierzero::cli::add_plan_command(app),
      tierzero::cli::add_report_command(app),       tierzero::cli::add_export_command(app)};
  if (const int code = reject_unknown_command(app, argc, argv); code >= 0) return code;
  apply_log_level(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (tierzero::process_rank() == 0) return app.exit(e);
    std::ostream silent(nullptr);  // the other ranks of an mpiexec job: rank 0 says it
    return app.exit(e, silent, silent);
  }
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
    return 0;
  } catch (const std::exception& e) {
    print_error(e);
  }
  return 1;
}
