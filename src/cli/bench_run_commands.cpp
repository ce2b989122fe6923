// The options of `tierzero bench train-nvme | train-stage3 | profile | train-modes | tp | pp |
// ulysses`: the benchmarks of real `tierzero train` runs (src/bench), which share the model, run
// length and launcher flags (bench::TrainRunOptions).
#include "bench_commands.hpp"

#include <memory>

#include "tierzero/bench/activations.hpp"
#include "tierzero/bench/pp.hpp"
#include "tierzero/bench/tp.hpp"
#include "tierzero/bench/train_modes.hpp"
#include "tierzero/bench/ulysses.hpp"

namespace tierzero::cli {

void add_train_run_options(CLI::App& c, bench::TrainRunOptions& o, const char* batch_help,
                           const char* repeats_help) {
  c.add_option("--layers", o.layers, "transformer blocks")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  c.add_option("--channels", o.channels, "channels (n_embd)")
      ->check(CLI::Range(int64_t{8}, int64_t{65536}))
      ->capture_default_str();
  c.add_option("--heads", o.heads, "attention heads")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  c.add_option("--seq", o.seq, "tokens per sequence (and the context length)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  c.add_option("--batch", o.batch, batch_help)
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  c.add_option("--steps", o.steps, "steps per run, warm-up included")
      ->check(CLI::Range(int64_t{2}, int64_t{100000}))
      ->capture_default_str();
  c.add_option("--warmup", o.warmup, "first steps of each run that are not counted")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  c.add_option("--repeats", o.repeats, repeats_help)->check(CLI::Range(int64_t{1}, int64_t{100}));
  c.add_option("--timeout", o.timeout_s, "seconds one run may take before it is killed")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  c.add_option("--dir", o.dir,
               "directory for the private temp directory (configs, metrics, NVMe swap); "
               "default /var/tmp");
  c.add_option("--mpiexec", o.mpiexec, "the MPI launcher (default: mpiexec on PATH)");
}

CLI::Option* add_ranged_option(CLI::App& c, const std::string& name, int64_t& value,
                               const std::string& help, int64_t lo, int64_t hi) {
  return c.add_option(name, value, help)->check(CLI::Range(lo, hi))->capture_default_str();
}

namespace {

void add_options(CLI::App& c, bench::BenchTrainModesOptions& o, const char* repeats_help) {
  add_train_run_options(c, o, "micro-batch per rank", repeats_help);
  c.add_option("--swap-buffers", o.swap_buffers,
               "train-nvme: offload_optimizer.buffer_count of the NVMe run (default: the "
               "config's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
}

}  // namespace

std::function<int()> add_bench_train_modes_commands(CLI::App& parent) {
  auto nvme = std::make_shared<bench::BenchTrainModesOptions>();
  auto stage3 = std::make_shared<bench::BenchTrainModesOptions>();
  auto prof = std::make_shared<bench::BenchTrainModesOptions>();
  auto all = std::make_shared<bench::BenchTrainModesOptions>();
  CLI::App* n = parent.add_subcommand(
      "train-nvme", "`tierzero train` on 2 ranks, stage 3: NVMe offload vs. host offload");
  add_options(*n, *nvme, "runs of each mode, alternating (default 2)");
  CLI::App* s = parent.add_subcommand(
      "train-stage3", "`tierzero train` on 2 ranks: stage 3 vs. stage 0 (data parallel)");
  add_options(*s, *stage3, "runs of each mode, alternating (default 2)");
  CLI::App* p = parent.add_subcommand(
      "profile", "`tierzero train` on 1 rank, stage 3: with --profile vs. without");
  add_options(*p, *prof, "runs of each mode, alternating (default 3)");
  CLI::App* a = parent.add_subcommand("train-modes",
                                      "train-nvme, train-stage3 and profile, one after the other");
  add_options(*a, *all, "runs of each mode (default 2; profile 3)");
  return [=] {
    if (n->parsed()) return bench::bench_train_nvme(*nvme).exit_code();
    if (s->parsed()) return bench::bench_train_stage3(*stage3).exit_code();
    if (p->parsed()) return bench::bench_profile_overhead(*prof).exit_code();
    if (a->parsed()) return bench::bench_train_modes(*all).exit_code();
    return -1;
  };
}

void add_compute_dtype_option(CLI::App& c, std::string& value) {
  c.add_option("--compute-dtype", value,
               "every run's tierzero.compute_dtype: fp32, or bf16 / fp16 (16-bit compute, with "
               "that working type)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
}

std::function<int()> add_bench_tp_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchTpOptions>();
  CLI::App* c = parent.add_subcommand(
      "tp", "`tierzero train`, same ranks: tensor parallel (+ sp) vs. data parallel, and bytes");
  add_train_run_options(
      *c, *o, "micro-batch per tensor-parallel replica (the dp-only run: batch / tp per rank)",
      "runs of each mode, alternating (default 2)");
  add_ranged_option(*c, "--ranks", o->ranks, "MPI ranks of every run", 2, 1024);
  add_ranged_option(*c, "--tp", o->tp, "tensor-parallel size of the tp runs (dp = ranks / tp)", 2,
                    1024);
  add_ranged_option(*c, "--stage", o->stage, "ZeRO stage of every run", 0, 3);
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads per rank", 1, 1024);
  c->add_flag("--activation-checkpointing", o->checkpointing,
              "run every mode with activation checkpointing");
  add_compute_dtype_option(*c, o->compute_dtype);
  return [o, c] { return c->parsed() ? bench::bench_tp(*o).exit_code() : -1; };
}

std::function<int()> add_bench_pp_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchPpOptions>();
  CLI::App* c = parent.add_subcommand(
      "pp", "`tierzero train` pipelines: measured bubble vs. (p-1)/(m+p-1), per schedule and m");
  add_train_run_options(*c, *o, "micro-batch (sequences per micro-batch)",
                        "runs of each mode, alternating (default 2)");
  add_ranged_option(*c, "--pp", o->pp, "pipeline stages (one rank each)", 2, 1024);
  c->add_option("--micro-batches", o->micro_batches, "micro-batches per step, one mode each")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  c->add_option("--schedules", o->schedules, "gpipe, 1f1b and/or interleaved")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  c->add_option("--virtual-stages", o->virtual_stages,
                "model chunks per rank of the interleaved runs (their m must be a multiple of "
                "--pp)")
      ->check(CLI::Range(int64_t{2}, int64_t{1024}))
      ->capture_default_str();
  c->add_flag("--receive-ahead", o->receive_ahead,
              "post each stage's receives ahead of the action in front (pipeline_receive_ahead)");
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads per rank", 1, 1024);
  return [o, c] { return c->parsed() ? bench::bench_pp(*o).exit_code() : -1; };
}

std::function<int()> add_bench_ulysses_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchUlyssesOptions>();
  CLI::App* c = parent.add_subcommand(
      "ulysses",
      "`tierzero train` with Ulysses: all-to-all bytes vs. analytic, longest sequence that fits");
  add_train_run_options(*c, *o, "sequences per micro-batch, on every rank",
                        "runs of each bytes mode (default 1)");
  c->add_option("--sizes", o->sizes, "Ulysses sizes of the bytes runs (one rank each)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{2}, int64_t{1024}))
      ->capture_default_str();
  c->add_option("--fit-sizes", o->fit_sizes, "Ulysses sizes of the longest-sequence search")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  c->add_option("--budget", o->budget, "device memory budget of the fit runs, e.g. 40MiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  add_ranged_option(*c, "--seq-step", o->seq_step, "the search's sequence granularity", 1,
                    int64_t{1} << 20);
  add_ranged_option(*c, "--max-seq", o->max_seq,
                    "the longest sequence tried (the fit runs' context)", 1, int64_t{1} << 24);
  add_ranged_option(*c, "--fit-steps", o->fit_steps, "steps of each fit run", 1, 1000);
  add_ranged_option(*c, "--probes", o->probes, "fit runs beyond the prediction, at most", 0, 100);
  add_ranged_option(*c, "--stage", o->stage, "ZeRO stage of every run", 0, 3);
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads per rank", 1, 1024);
  c->add_flag("--activation-checkpointing", o->checkpointing, "run with activation checkpointing");
  add_compute_dtype_option(*c, o->compute_dtype);
  return [o, c] { return c->parsed() ? bench::bench_ulysses(*o).exit_code() : -1; };
}

std::function<int()> add_bench_activations_command(CLI::App& bench) {
  auto o = std::make_shared<bench::BenchActivationsOptions>();
  CLI::App* c = bench.add_subcommand(
      "activations",
      "checkpoints on device, host, NVMe: longest sequence under a budget, step time");
  add_train_run_options(*c, *o, "sequences per micro-batch",
                        "step-time runs per placement, alternating (default 2)");
  c->add_option("--budget", o->budget, "device memory budget of the fit runs, e.g. 48MiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  add_ranged_option(*c, "--seq-step", o->seq_step, "the search's sequence granularity", 1,
                    int64_t{1} << 20);
  add_ranged_option(*c, "--max-seq", o->max_seq, "the longest sequence tried", 1, int64_t{1} << 24);
  add_ranged_option(*c, "--fit-steps", o->fit_steps, "steps of each fit run", 1, 1000);
  add_ranged_option(*c, "--probes", o->probes, "fit runs beyond the prediction, at most", 0, 100);
  add_ranged_option(*c, "--stage", o->stage, "ZeRO stage of every run", 0, 3);
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads", 1, 1024);
  add_ranged_option(*c, "--buffer-count", o->buffer_count,
                    "device slots of the checkpoints (activation_checkpoints.buffer_count)", 2,
                    1 << 20);
  return [o, c] { return c->parsed() ? bench::bench_activations(*o) : -1; };
}

}  // namespace tierzero::cli
