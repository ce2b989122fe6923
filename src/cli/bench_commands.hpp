// The `tierzero bench` subcommands beside the simple ones in cmd_bench.cpp: those of the
// benchmarks of real `tierzero train` runs (bench_run_commands.cpp), and the option helpers they
// share. Each add_* puts its subcommand(s) under `parent` and returns a function that runs the
// one parsed, returning its exit code, or -1 when none of them was.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "tierzero/bench/train_run_options.hpp"

namespace tierzero::cli {

// bench::TrainRunOptions' flags (--layers ... --mpiexec) on `c`, with the benchmark's own help for
// --batch and --repeats.
void add_train_run_options(CLI::App& c, bench::TrainRunOptions& o, const char* batch_help,
                           const char* repeats_help);

// --compute-dtype of a benchmark whose runs train: fp32, bf16 or fp16 (a 16-bit one with that
// working type), into `value`.
void add_compute_dtype_option(CLI::App& c, std::string& value);

// An integer option of `c` checked to lie in [lo, hi], its default shown in --help.
CLI::Option* add_ranged_option(CLI::App& c, const std::string& name, int64_t& value,
                               const std::string& help, int64_t lo, int64_t hi);

std::function<int()> add_bench_train_modes_commands(
    CLI::App& parent);  // train-nvme ... train-modes
std::function<int()> add_bench_tp_command(CLI::App& parent);
std::function<int()> add_bench_pp_command(CLI::App& parent);
std::function<int()> add_bench_ulysses_command(CLI::App& parent);
// bench activations: checkpoints on device, host and NVMe (tierzero/bench/activations.hpp).
std::function<int()> add_bench_activations_command(CLI::App& bench);

}  // namespace tierzero::cli
