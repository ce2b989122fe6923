// The tierzero subcommands; each registers its options on the CLI11 app and says how to run.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tierzero::cli {

struct Command {
  CLI::App* app;             // the subcommand; parsed() tells whether it was chosen
  std::function<int()> run;  // exit code
};

Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_prepare_data_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_export_command(CLI::App& app);

}  // namespace tierzero::cli
