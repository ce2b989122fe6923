// The tierzero subcommands; each registers its options on the CLI11 app and says how to run.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace tierzero::cli {

struct Command {
  CLI::App* app;             // the subcommand; parsed() tells whether it was chosen
  std::function<int()> run;  // exit code
};

// A real number in [lo, hi]. CLI::Range lets NaN through (every comparison with it is false),
// and a NaN flag was then ignored or poisoned the run; this refuses it, and infinities, by name.
inline CLI::Validator finite_in(double lo, double hi) {
  char range[64];
  std::snprintf(range, sizeof range, "[%g - %g]", lo, hi);
  const std::string bounds = range;
  return CLI::Validator(
      [lo, hi, bounds](std::string& text) -> std::string {
        double v = 0.0;
        if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v))
          return "'" + text + "' is not a finite number";
        if (!(v >= lo && v <= hi)) return "Value " + text + " not in range " + bounds;
        return {};
      },
      "FLOAT in " + bounds);
}

// A whole number in [lo, hi]: CLI11's ranges call "abc" out of range rather than not a number.
inline CLI::Validator whole_in(int64_t lo, int64_t hi) {
  const std::string bounds = "[" + std::to_string(lo) + " - " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, bounds](std::string& text) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a whole number";
        if (v < lo || v > hi) return "Value " + text + " not in range " + bounds;
        return {};
      },
      "INT in " + bounds);
}

Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_prepare_data_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_export_command(CLI::App& app);

}  // namespace tierzero::cli
