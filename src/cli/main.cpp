// The tierzero binary: parses the command line, runs one subcommand, and turns any Error into
// one clear line on stderr and a non-zero exit.
#include <cstdio>
#include <exception>
#include <vector>

#include "commands.hpp"
#include "tierzero/core/agreed_failure.hpp"
#include "tierzero/core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"TierZero: train GPT models larger than your accelerator's memory"};
  app.require_subcommand(1);
  std::vector<tierzero::cli::Command> commands = {
      tierzero::cli::add_train_command(app),        tierzero::cli::add_eval_command(app),
      tierzero::cli::add_prepare_data_command(app), tierzero::cli::add_bench_command(app),
      tierzero::cli::add_estimate_command(app),     tierzero::cli::add_plan_command(app),
      tierzero::cli::add_report_command(app),       tierzero::cli::add_export_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
    return 0;
  } catch (const tierzero::AgreedFailure& e) {
    if (e.reports()) std::fprintf(stderr, "tierzero: error: %s\n", e.what());
  } catch (const tierzero::Error& e) {
    std::fprintf(stderr, "tierzero: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierzero: error: %s\n", e.what());
  }
  return 1;
}
