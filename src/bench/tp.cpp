// `tierzero bench tp` (see tp.hpp). Three modes of one small GPT on the same `ranks`, each a
// `tierzero train` child run under mpiexec (child_runs.hpp) with --metrics and
// --memory-json, alternating tp, tp + sp, dp, tp, tp + sp, dp, ... over the repeats:
//   tp:      tensor_parallel tp, dp = ranks / tp replicas of micro-batch B;
//   tp + sp: the same with sequence_parallel;
//   dp:      tensor_parallel 1, dp = ranks, micro-batch B / tp: the same global batch per step.
// Every step of every tp run must move exactly the analytic bytes per kind of collective
// (nn::expected_tensor_parallel_traffic for one micro-batch x the micro-batches per step, which is
// 1 here), and the dp run none; anything else is an error. Step times are the median over the
// steps after the warm-up of all a mode's runs; the activation peak is rank 0's, from the memory
// report.
#include "tierzero/bench/tp.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "child_runs.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/tp/tensor_parallel_group.hpp"
#include "tierzero/train/config_bridges.hpp"

namespace tierzero::bench {

namespace {

struct TpMode {
  std::string label;  // in the tables
  std::string tag;    // in file names
  size_t tp = 1;
  bool sp = false;
  size_t micro_batch = 1;              // per data-parallel replica
  nn::TensorParallelTraffic analytic;  // bytes of one step
  size_t predicted_activation = 0;     // nn::GPT::activation_bytes_for, per rank
};

struct TpRun {
  std::vector<StepMetrics> steps;  // all steps, warm-up included
  double activation_peak = 0.0;    // rank 0, device tier, bytes
  double wall_s = 0.0;
};

size_t sz(int64_t v) {
  return static_cast<size_t>(v);
}

TpMode make_mode(const BenchTpOptions& o, const nn::GPTConfig& config, std::string label,
                 std::string tag, size_t tp, bool sp, size_t micro_batch) {
  TpMode m{std::move(label), std::move(tag), tp, sp, micro_batch, {}, 0};
  const auto T = sz(o.seq);
  const DType compute = dtype_from_name(o.compute_dtype);
  const nn::ActivationDims dims =
      nn::ActivationDims::of(config, micro_batch, T, tp, sp, 1, compute);
  constexpr size_t micro_batches_per_step = 1;  // gradient_accumulation_steps
  const nn::TensorParallelTraffic one =
      nn::expected_tensor_parallel_traffic(config.num_layers, dims, o.checkpointing);
  m.analytic.all_reduce_bytes = one.all_reduce_bytes * micro_batches_per_step;
  m.analytic.all_gather_bytes = one.all_gather_bytes * micro_batches_per_step;
  m.analytic.reduce_scatter_bytes = one.reduce_scatter_bytes * micro_batches_per_step;
  m.predicted_activation =
      nn::GPT::activation_bytes_for(config, micro_batch, T, o.checkpointing, tp, sp, 1, compute);
  return m;
}

std::string config_json(const BenchTpOptions& o, const TpMode& m) {
  nlohmann::ordered_json c;
  c["train_micro_batch_size_per_gpu"] = m.micro_batch;
  c["gradient_accumulation_steps"] = 1;
  c["zero_optimization"] = {{"stage", o.stage}, {"stage3_param_persistence_threshold", 0}};
  nlohmann::ordered_json t = bench_tierzero_json(o, o.threads);
  t["tensor_parallel"] = m.tp;
  t["sequence_parallel"] = m.sp;
  t["activation_checkpointing"] = o.checkpointing;
  c["tierzero"] = t;
  set_bench_compute(c, o.compute_dtype);
  return c.dump();
}

struct Bench {
  const BenchTpOptions& o;
  std::string exe;
  std::string mpiexec;
  std::string dir;

  std::string config_path(const TpMode& m) const { return dir + "/" + m.tag + ".json"; }
  std::string base(const TpMode& m, int index) const {
    return dir + "/" + m.tag + "-" + std::to_string(index);
  }
  std::vector<std::string> argv(const TpMode& m, int index) const {
    return train_argv(exe, mpiexec, static_cast<int>(o.ranks), config_path(m), o.steps, o.threads,
                      base(m, index));
  }

  TpRun run(const TpMode& m, int index) const {
    const std::string b = base(m, index);
    TpRun r;
    r.wall_s = run_child(argv(m, index), child_environment(o.threads), b + ".log", o.timeout_s);
    r.steps = read_metrics(b + ".metrics.jsonl", o.steps);
    const nlohmann::json report = read_memory_report(b + ".memory.json");
    try {
      r.activation_peak = report.at("tiers").at("device").at("activation").at("peak").get<double>();
    } catch (const nlohmann::json::exception& e) {
      TZ_THROW("bad memory report " + b + ".memory.json: " + e.what(), "run the command by hand");
    }
    return r;
  }
};

size_t total(const StepMetrics& s) {
  return s.tp_all_reduce_bytes + s.tp_all_gather_bytes + s.tp_reduce_scatter_bytes;
}

// Throws Error unless every step of `r` moved exactly the analytic bytes of each kind.
void check_bytes(const TpMode& m, int index, const TpRun& r) {
  const nn::TensorParallelTraffic& a = m.analytic;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepMetrics& s = r.steps[i];
    const struct {
      const char* kind;
      size_t measured, analytic;
    } kinds[] = {{"all-reduce", s.tp_all_reduce_bytes, a.all_reduce_bytes},
                 {"all-gather", s.tp_all_gather_bytes, a.all_gather_bytes},
                 {"reduce-scatter", s.tp_reduce_scatter_bytes, a.reduce_scatter_bytes}};
    for (const auto& k : kinds)
      TZ_CHECK(k.measured == k.analytic,
               "the " + m.label + " run " + std::to_string(index + 1) + ", step " +
                   std::to_string(i + 1) + ": its tensor-parallel " + k.kind + "s moved " +
                   std::to_string(k.measured) + " bytes, the analytic volume is " +
                   std::to_string(k.analytic) + " (all kinds: measured all-reduce " +
                   std::to_string(s.tp_all_reduce_bytes) + ", all-gather " +
                   std::to_string(s.tp_all_gather_bytes) + ", reduce-scatter " +
                   std::to_string(s.tp_reduce_scatter_bytes) + "; analytic " +
                   std::to_string(a.all_reduce_bytes) + ", " + std::to_string(a.all_gather_bytes) +
                   ", " + std::to_string(a.reduce_scatter_bytes) + ")",
               "the collectives of the modules and nn::expected_tensor_parallel_traffic "
               "(docs/tensor_parallel.md, \"Communication volume\") disagree; one of them is "
               "wrong");
  }
}

void print_run_row(const TpMode& m, int index, const TpRun& r, int64_t warmup) {
  const std::vector<double> ms = counted_ms(r.steps, warmup);
  double lo = ms.front(), hi = ms.front();
  for (double x : ms) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  std::fprintf(stderr, "  %-22s %3d %10.1f %9.1f %9.1f %7.1f %14zu %12.1f\n", m.label.c_str(),
               index + 1, median(ms), lo, hi, r.wall_s, total(r.steps.back()),
               r.activation_peak / 1e6);
  std::fflush(stderr);
}

struct Summary {
  double median_ms = 0.0;
  std::vector<double> run_medians;
  double activation_peak = 0.0;  // the largest over the runs
  StepMetrics bytes;             // of the last step of the last run (every step is equal)
};

Summary summarize(const std::vector<TpRun>& runs, int64_t warmup) {
  Summary s;
  std::vector<double> all;
  for (const TpRun& r : runs) {
    const std::vector<double> ms = counted_ms(r.steps, warmup);
    all.insert(all.end(), ms.begin(), ms.end());
    s.run_medians.push_back(median(ms));
    s.activation_peak = std::max(s.activation_peak, r.activation_peak);
  }
  s.median_ms = median(all);
  s.bytes = runs.back().steps.back();
  return s;
}

nlohmann::ordered_json result(const char* bench, double value, const char* unit,
                              const char* baseline, double baseline_value, double ratio,
                              const BenchTpOptions& o) {
  nlohmann::ordered_json j = bench_result(bench, value, unit, baseline, baseline_value, ratio);
  j["ranks"] = o.ranks;
  j["tp"] = o.tp;
  j["dp"] = o.ranks / o.tp;
  j["threads"] = o.threads;
  j["stage"] = o.stage;
  j["activation_checkpointing"] = o.checkpointing;
  j["compute_dtype"] = o.compute_dtype;
  j["layers"] = o.layers;
  j["channels"] = o.channels;
  j["heads"] = o.heads;
  j["seq"] = o.seq;
  j["batch"] = o.batch;
  j["dp_batch"] = o.batch / o.tp;
  j["steps"] = o.steps;
  j["warmup"] = o.warmup;
  j["repeats"] = o.repeats;
  return j;
}

void print_bytes_rows(const TpMode& m, const Summary& s) {
  const nn::TensorParallelTraffic& a = m.analytic;
  std::fprintf(stderr, "  %-22s %-9s %14zu %14zu %14zu %14zu\n", m.label.c_str(), "measured",
               s.bytes.tp_all_reduce_bytes, s.bytes.tp_all_gather_bytes,
               s.bytes.tp_reduce_scatter_bytes, total(s.bytes));
  std::fprintf(stderr, "  %-22s %-9s %14zu %14zu %14zu %14zu\n", "", "analytic", a.all_reduce_bytes,
               a.all_gather_bytes, a.reduce_scatter_bytes, a.total_bytes());
}

nlohmann::ordered_json bytes_result(const char* name, const TpMode& m, const Summary& s,
                                    const BenchTpOptions& o) {
  const nn::TensorParallelTraffic& a = m.analytic;
  const auto measured = static_cast<double>(total(s.bytes));
  const auto analytic = static_cast<double>(a.total_bytes());
  nlohmann::ordered_json j =
      result(name, measured, "bytes", "analytic", analytic,
             measured > 0.0 ? analytic / measured : (analytic == 0.0 ? 1.0 : 0.0), o);
  j["sequence_parallel"] = m.sp;
  j["all_reduce_bytes"] = s.bytes.tp_all_reduce_bytes;
  j["all_gather_bytes"] = s.bytes.tp_all_gather_bytes;
  j["reduce_scatter_bytes"] = s.bytes.tp_reduce_scatter_bytes;
  j["analytic_all_reduce_bytes"] = a.all_reduce_bytes;
  j["analytic_all_gather_bytes"] = a.all_gather_bytes;
  j["analytic_reduce_scatter_bytes"] = a.reduce_scatter_bytes;
  j["micro_batches_per_step"] = 1;
  return j;
}

nlohmann::ordered_json step_result(const char* name, const TpMode& m, const Summary& s,
                                   const Summary& dp, const BenchTpOptions& o) {
  nlohmann::ordered_json j = result(name, round_to(s.median_ms, 3), "ms", "dp-only",
                                    round_to(dp.median_ms, 3), dp.median_ms / s.median_ms, o);
  j["sequence_parallel"] = m.sp;
  const auto rounded = [](std::vector<double> v) {
    for (double& x : v) x = round_to(x, 1);
    return v;
  };
  j["run_ms"] = rounded(s.run_medians);
  j["dp_run_ms"] = rounded(dp.run_medians);
  return j;
}

void validate(const BenchTpOptions& o) {
  validate_train_run_options(o);
  TZ_CHECK(o.tp >= 2 && o.ranks % o.tp == 0,
           "--tp " + std::to_string(o.tp) + " must be at least 2 and divide --ranks " +
               std::to_string(o.ranks),
           "for example: --ranks 2 --tp 2, or --ranks 4 --tp 2");
  TZ_CHECK(o.heads % o.tp == 0,
           "--heads " + std::to_string(o.heads) + " must be divisible by --tp " +
               std::to_string(o.tp) + " (a head is never cut)",
           "for example: --heads 8 --tp 2");
  TZ_CHECK(o.batch % o.tp == 0,
           "--batch " + std::to_string(o.batch) + " must be divisible by --tp " +
               std::to_string(o.tp) +
               ": the dp-only run takes micro-batch batch / tp on each of the ranks, so that "
               "both see the same global batch",
           "for example: --batch 2 --tp 2");
}

}  // namespace

BenchReport bench_tp(const BenchTpOptions& o) {
  validate(o);
  const nn::GPTConfig config = bench_model_config(o, o.seq);
  const size_t tp = sz(o.tp), dp = sz(o.ranks / o.tp), B = sz(o.batch);
  const std::string tp_text = "tp " + std::to_string(tp) + " x dp " + std::to_string(dp);
  // The modes (and with them the analytic volumes) first: ActivationDims::of throws, naming the
  // culprit, on what does not divide before anything runs.
  const std::vector<TpMode> modes = {
      make_mode(o, config, tp_text, "tp", tp, false, B),
      make_mode(o, config, tp_text + " + sp", "tpsp", tp, true, B),
      make_mode(o, config, "dp " + std::to_string(o.ranks) + " (baseline)", "dp", 1, false,
                B * dp / sz(o.ranks))};
  TempDir dir(bench_base_dir(o.dir));
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};

  std::fprintf(stderr,
               "bench tp: GPT %lld layers x %lld channels, %lld heads, vocab %lld (padded %zu), "
               "seq %lld; %lld ranks x %lld thread(s), ZeRO stage %lld%s; %lld steps per run "
               "(first %lld not timed), %lld runs per mode, alternating; global batch %zu "
               "sequences per step in every mode\n",
               static_cast<long long>(o.layers), static_cast<long long>(o.channels),
               static_cast<long long>(o.heads), static_cast<long long>(kBenchVocab),
               config.padded_vocab_size, static_cast<long long>(o.seq),
               static_cast<long long>(o.ranks), static_cast<long long>(o.threads),
               static_cast<long long>(o.stage), o.checkpointing ? ", activation checkpointing" : "",
               static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
               static_cast<long long>(o.repeats), B * dp);
  for (const TpMode& m : modes) {
    write_text_file(bench.config_path(m), config_json(o, m));
    std::fprintf(stderr, "  %s: micro-batch %zu per replica\n    %s\n    config: %s\n",
                 m.label.c_str(), m.micro_batch, join(bench.argv(m, 0)).c_str(),
                 config_json(o, m).c_str());
  }
  std::fprintf(stderr, "  %-22s %3s %10s %9s %9s %7s %14s %12s\n", "mode", "run", "median ms",
               "min ms", "max ms", "wall s", "tp bytes/step", "act. peak MB");
  std::vector<std::vector<TpRun>> runs(modes.size());
  for (int i = 0; i < static_cast<int>(o.repeats); ++i)
    for (size_t k = 0; k < modes.size(); ++k) {
      runs[k].push_back(bench.run(modes[k], i));
      print_run_row(modes[k], i, runs[k].back(), o.warmup);
      check_bytes(modes[k], i, runs[k].back());
    }
  std::vector<Summary> s;
  for (const auto& r : runs) s.push_back(summarize(r, o.warmup));
  const Summary &tps = s[0], &sps = s[1], &dps = s[2];

  std::fprintf(stderr,
               "  tensor-parallel collective bytes per step (rank 0; every step of every run "
               "equal to the analytic volume, nn::expected_tensor_parallel_traffic x 1 "
               "micro-batch):\n");
  std::fprintf(stderr, "  %-22s %-9s %14s %14s %14s %14s\n", "mode", "", "all-reduce", "all-gather",
               "reduce-scatter", "total");
  for (size_t k = 0; k < modes.size(); ++k) print_bytes_rows(modes[k], s[k]);
  std::fprintf(stderr, "  step time, median of the timed steps of all runs:\n");
  for (size_t k = 0; k < modes.size(); ++k) {
    std::string runs_text;
    for (double x : s[k].run_medians) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.1f", runs_text.empty() ? "" : ", ", x);
      runs_text += buf;
    }
    std::fprintf(stderr, "  %-32s %9.1f ms (runs %s)\n", modes[k].label.c_str(), s[k].median_ms,
                 runs_text.c_str());
  }
  std::fprintf(stderr, "  %-32s %9.3f\n", ("ratio dp / " + modes[0].label).c_str(),
               dps.median_ms / tps.median_ms);
  std::fprintf(stderr, "  %-32s %9.3f\n", ("ratio dp / " + modes[1].label).c_str(),
               dps.median_ms / sps.median_ms);
  std::fprintf(stderr, "  activation peak (rank 0, measured; predicted by the estimator):\n");
  for (size_t k = 0; k < modes.size(); ++k)
    std::fprintf(stderr, "  %-32s %9.2f MB (predicted %.2f MB)\n", modes[k].label.c_str(),
                 s[k].activation_peak / 1e6,
                 static_cast<double>(modes[k].predicted_activation) / 1e6);
  std::fprintf(stderr, "  %-32s %9.3f\n", ("ratio " + modes[0].label + " / + sp").c_str(),
               tps.activation_peak / sps.activation_peak);
  std::fflush(stderr);

  BenchReport report;
  report.emit(bytes_result("tp.bytes", modes[0], tps, o));
  report.emit(bytes_result("tp_sp.bytes", modes[1], sps, o));
  report.emit(step_result("tp.step_vs_dp", modes[0], tps, dps, o));
  report.emit(step_result("tp_sp.step_vs_dp", modes[1], sps, dps, o));
  nlohmann::ordered_json act =
      result("tp_sp.activation_bytes", sps.activation_peak, "bytes", "tp without sp",
             tps.activation_peak, tps.activation_peak / sps.activation_peak, o);
  act["predicted_bytes"] = modes[1].predicted_activation;
  act["baseline_predicted_bytes"] = modes[0].predicted_activation;
  act["dp_bytes"] = dps.activation_peak;
  report.emit(act);
  return report;
}

}  // namespace tierzero::bench
