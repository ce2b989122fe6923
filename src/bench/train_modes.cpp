// `tierzero bench train-nvme | train-stage3 | profile | train-modes` (see bench_train_modes.hpp).
// Each benchmark writes DeepSpeed configs for one small GPT into a private temp directory, runs
// `tierzero train` (this binary, from /proc/self/exe) as a child process per run, directly or
// under mpiexec, with --metrics, and times the steps the trainer itself measured: the first
// `warmup` steps of every run are dropped (the first records the fetch trace, the second still
// warms caches), and the figure of a mode is the median over the remaining steps of all its runs.
// The two modes of a benchmark alternate (A B A B ...) so that load from other processes on a
// shared machine falls on both. A child's stdout and stderr go to a log file in the temp
// directory, whose tail is shown when it fails; the directory (configs, metrics, NVMe swap) is
// removed at the end. Each run also writes --memory-json, so the table shows on which tier the
// model state really was, and a run that did not offload where it should is an error. The child
// processes are run by the helpers in child_runs.hpp, which tp.cpp shares.
#include "tierzero/bench/train_modes.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_runs.hpp"
#include "machine_cpu_times.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::bench {

namespace {

// Model state (param + grad + optimizer, current) of rank 0 on each tier, from --memory-json.
struct StateBytes {
  double device = 0.0, host = 0.0, nvme = 0.0;
  double host_io_peak = 0.0;  // pinned staging (NVMe slots, reads, handoffs, bounce buffers)
};
StateBytes read_state_bytes(const std::string& path) {
  const nlohmann::json j = read_memory_report(path);
  StateBytes b;
  try {
    const auto tier = [&](const char* name) {
      double s = 0.0;
      const auto& t = j.at("tiers").at(name);
      for (const char* c : {"param", "grad", "optimizer"}) s += t.at(c).at("current").get<double>();
      return s;
    };
    b.device = tier("device");
    b.host = tier("host");
    b.nvme = tier("nvme");
    b.host_io_peak = j.at("tiers").at("host").at("io").at("peak").get<double>();
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("bad memory report " + path + ": " + e.what(), "run the command by hand");
  }
  return b;
}

// One way of running the model: a config, a launcher and extra flags.
struct Mode {
  std::string label;    // in the table
  std::string tag;      // in file names
  int ranks = 1;        // > 1: under mpiexec
  int64_t threads = 1;  // OpenMP threads per rank
  int stage = 0;        // ZeRO stage
  nlohmann::ordered_json offload =
      nlohmann::ordered_json::object();  // extra zero_optimization keys
  bool profile = false;                  // pass --profile
  std::string expect_tier;               // "nvme" or "host": most of the model state must be there
};

struct Run {
  std::vector<StepMetrics> steps;  // all steps, warm-up included
  StateBytes state;
  double wall_s = 0.0;
  MachineCpuTimes cpu;  // the whole machine's CPU time during the run
  double profile_bytes = 0.0;
};

struct Bench {
  const BenchTrainModesOptions& o;
  std::string exe;
  std::string mpiexec;  // empty when no mode needs it
  std::string dir;

  std::string config_json(const Mode& m) const {
    nlohmann::ordered_json zero;
    zero["stage"] = m.stage;
    zero["stage3_param_persistence_threshold"] = 0;
    for (const auto& [k, v] : m.offload.items()) zero[k] = v;
    nlohmann::ordered_json c;
    c["train_micro_batch_size_per_gpu"] = o.batch;
    c["zero_optimization"] = zero;
    c["tierzero"] = bench_tierzero_json(o, m.threads);
    return c.dump();
  }

  std::string config_path(const Mode& m) const { return dir + "/" + m.tag + ".json"; }

  std::vector<std::string> argv(const Mode& m, int index) const {
    const std::string base = dir + "/" + m.tag + "-" + std::to_string(index);
    std::vector<std::string> a =
        train_argv(exe, mpiexec, m.ranks, config_path(m), o.steps, m.threads, base);
    if (m.profile) {
      a.emplace_back("--profile");
      a.push_back(base + ".profile.json");
    }
    return a;
  }

  void write_config(const Mode& m) const { write_text_file(config_path(m), config_json(m)); }

  Run run(const Mode& m, int index) const {
    const std::string base = dir + "/" + m.tag + "-" + std::to_string(index);
    Run r;
    const MachineCpuTimes before = read_machine_cpu_times();
    r.wall_s = run_child(argv(m, index), child_environment(m.threads), base + ".log", o.timeout_s);
    r.cpu = read_machine_cpu_times() - before;
    r.steps = read_metrics(base + ".metrics.jsonl", o.steps);
    r.state = read_state_bytes(base + ".memory.json");
    if (m.profile) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(base + ".profile.json", ec);
      TZ_CHECK(!ec && size > 0, "the --profile run wrote no profile " + base + ".profile.json",
               "run the command by hand");
      r.profile_bytes = static_cast<double>(size);
    }
    const double held = m.expect_tier == "nvme"   ? r.state.nvme
                        : m.expect_tier == "host" ? r.state.host
                                                  : r.state.device;
    const double total = r.state.device + r.state.host + r.state.nvme;
    TZ_CHECK(total > 0 && held >= 0.5 * total,
             "the " + m.label + " run kept its model state elsewhere than on the " +
                 (m.expect_tier.empty() ? std::string("device") : m.expect_tier) +
                 " tier (device " + format_bytes(static_cast<size_t>(r.state.device)) + ", host " +
                 format_bytes(static_cast<size_t>(r.state.host)) + ", nvme " +
                 format_bytes(static_cast<size_t>(r.state.nvme)) + ")",
             "check the config printed above");
    return r;
  }
};

struct ModeSummary {
  double median_ms = 0.0;
  double steal_s = -1.0, iowait_s = -1.0;  // machine CPU seconds per run, mean; -1: unknown
  double hits = 0.0, on_demand = 0.0, stall_ms = 0.0;  // per counted step, mean
  std::vector<double> run_medians;
};

ModeSummary summarize(const std::vector<Run>& runs, int64_t warmup) {
  ModeSummary s;
  std::vector<double> ms, hits, od, stall;
  for (const Run& r : runs) {
    std::vector<double> run_ms;
    for (size_t i = static_cast<size_t>(warmup); i < r.steps.size(); ++i) {
      run_ms.push_back(r.steps[i].ms);
      hits.push_back(r.steps[i].prefetch_hits);
      od.push_back(r.steps[i].on_demand_fetches);
      stall.push_back(r.steps[i].stall_ms);
    }
    ms.insert(ms.end(), run_ms.begin(), run_ms.end());
    s.run_medians.push_back(median(run_ms));
  }
  s.median_ms = median(ms);
  std::vector<double> steal, iowait;
  for (const Run& r : runs) {
    if (!r.cpu.valid) continue;
    steal.push_back(r.cpu.steal_s);
    iowait.push_back(r.cpu.iowait_s);
  }
  if (!steal.empty() && steal.size() == runs.size()) {
    s.steal_s = mean(steal);
    s.iowait_s = mean(iowait);
  }
  s.hits = mean(hits);
  s.on_demand = mean(od);
  s.stall_ms = mean(stall);
  return s;
}

void print_run_row(const Mode& m, int index, const Run& r, int64_t warmup) {
  std::vector<double> ms, hits, od, stall;
  for (size_t i = static_cast<size_t>(warmup); i < r.steps.size(); ++i) {
    ms.push_back(r.steps[i].ms);
    hits.push_back(r.steps[i].prefetch_hits);
    od.push_back(r.steps[i].on_demand_fetches);
    stall.push_back(r.steps[i].stall_ms);
  }
  char cpu[64] = "      -        -";
  if (r.cpu.valid) std::snprintf(cpu, sizeof cpu, "%7.2f %8.2f", r.cpu.steal_s, r.cpu.iowait_s);
  std::fprintf(stderr, "  %-26s %3d %10.1f %9.1f %9.1f %7.1f %8.1f %9.2f %7.1f %s\n",
               m.label.c_str(), index + 1, median(ms), *std::min_element(ms.begin(), ms.end()),
               *std::max_element(ms.begin(), ms.end()), mean(hits), mean(od), mean(stall), r.wall_s,
               cpu);
  std::fflush(stderr);
}

void print_header() {
  std::fprintf(stderr, "  %-26s %3s %10s %9s %9s %7s %8s %9s %7s %7s %8s\n", "mode", "run",
               "median ms", "min ms", "max ms", "hits", "on-dem.", "stall ms", "wall s", "steal s",
               "iowait s");
}

// Runs modes a and b alternately, `repeats` times each; prints the table rows as it goes.
struct PairResult {
  ModeSummary a, b;
  std::vector<Run> runs_a, runs_b;
};
PairResult run_pair(Bench& bench, const Mode& a, const Mode& b, int64_t repeats) {
  bench.write_config(a);
  bench.write_config(b);
  std::fprintf(stderr, "  %s: %s\n    config: %s\n", a.label.c_str(),
               join(bench.argv(a, 0)).c_str(), bench.config_json(a).c_str());
  std::fprintf(stderr, "  %s: %s\n    config: %s\n", b.label.c_str(),
               join(bench.argv(b, 0)).c_str(), bench.config_json(b).c_str());
  std::fprintf(stderr,
               "  per run: median/min/max of steps %lld..%lld; per step means of prefetch hits, "
               "on-demand fetches and stall (rank 0); the whole machine's CPU seconds of steal "
               "(the hypervisor's) and iowait during the run (/proc/stat)\n",
               static_cast<long long>(bench.o.warmup + 1), static_cast<long long>(bench.o.steps));
  print_header();
  PairResult p;
  for (int i = 0; i < static_cast<int>(repeats); ++i) {
    p.runs_a.push_back(bench.run(a, i));
    print_run_row(a, i, p.runs_a.back(), bench.o.warmup);
    p.runs_b.push_back(bench.run(b, i));
    print_run_row(b, i, p.runs_b.back(), bench.o.warmup);
  }
  p.a = summarize(p.runs_a, bench.o.warmup);
  p.b = summarize(p.runs_b, bench.o.warmup);
  return p;
}

std::string model_text(const BenchTrainModesOptions& o) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "GPT %lld layers x %lld channels, %lld heads, vocab 257, seq %lld, micro-batch %lld, "
      "%lld steps (first %lld not counted)",
      static_cast<long long>(o.layers), static_cast<long long>(o.channels),
      static_cast<long long>(o.heads), static_cast<long long>(o.seq),
      static_cast<long long>(o.batch), static_cast<long long>(o.steps),
      static_cast<long long>(o.warmup));
  return buf;
}

int64_t repeats_or(const BenchTrainModesOptions& o, int64_t fallback) {
  return o.repeats > 0 ? o.repeats : fallback;
}

// One result line: the common fields, the run's shape, then `extra` (the benchmark's own).
nlohmann::ordered_json result_json(const char* name, double value, const char* baseline,
                                   double baseline_value, const BenchTrainModesOptions& o,
                                   int ranks, int64_t threads, int64_t repeats,
                                   const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json j = bench_result(name, round_to(value, 3), "ms/step", baseline,
                                          round_to(baseline_value, 3), baseline_value / value);
  j["ranks"] = ranks;
  j["threads"] = threads;
  j["layers"] = o.layers;
  j["channels"] = o.channels;
  j["seq"] = o.seq;
  j["batch"] = o.batch;
  j["steps"] = o.steps;
  j["warmup"] = o.warmup;
  j["repeats"] = repeats;
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// Each run's median step (ms), to one decimal.
nlohmann::ordered_json run_medians_json(const std::vector<double>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (double x : v) a.push_back(round_to(x, 1));
  return a;
}

}  // namespace

BenchReport bench_train_nvme(const BenchTrainModesOptions& o) {
  validate_train_run_options(o);
  const int64_t repeats = repeats_or(o, 2);
  TempDir dir(bench_base_dir(o.dir));
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};
  const std::string swap = dir.path() + "/swap";
  std::filesystem::create_directory(swap);
  const nlohmann::ordered_json nvme = {{"device", "nvme"}, {"nvme_path", swap}};
  nlohmann::ordered_json optimizer_nvme = nvme;
  if (o.swap_buffers > 0) optimizer_nvme["buffer_count"] = o.swap_buffers;
  const nlohmann::ordered_json cpu = {{"device", "cpu"}};
  Mode n{"stage 3, NVMe offload",
         "nvme",
         2,
         1,
         3,
         {{"offload_param", nvme}, {"offload_optimizer", optimizer_nvme}},
         false,
         "nvme"};
  Mode h{"stage 3, host offload",
         "host",
         2,
         1,
         3,
         {{"offload_param", cpu}, {"offload_optimizer", cpu}},
         false,
         "host"};
  std::fprintf(stderr,
               "bench train-nvme: %s; 2 ranks x 1 thread; params and optimizer on NVMe "
               "(%s) vs host\n",
               model_text(o).c_str(), swap.c_str());
  const PairResult p = run_pair(bench, n, h, repeats);
  const double ratio = p.b.median_ms / p.a.median_ms;
  std::fprintf(stderr,
               "  %-40s %9.1f ms (prefetch hits %.1f, on-demand %.1f, stall %.2f ms per step)\n",
               "NVMe offload, median step", p.a.median_ms, p.a.hits, p.a.on_demand, p.a.stall_ms);
  std::fprintf(
      stderr, "  %-40s %9.1f ms (prefetch hits %.1f, on-demand %.1f, stall %.2f ms per step)\n",
      "host offload, median step (baseline)", p.b.median_ms, p.b.hits, p.b.on_demand, p.b.stall_ms);
  std::fprintf(stderr, "  %-40s %9.3f (goal >= 0.77, i.e. NVMe <= 1.3x host): %s\n",
               "ratio host / NVMe", ratio, ratio >= 0.77 ? "met" : "NOT met");
  const StateBytes& ns = p.runs_a.front().state;
  const StateBytes& hs = p.runs_b.front().state;
  std::fprintf(stderr,
               "  rank 0 memory: NVMe run %.1f MB of model state on NVMe, %.1f MB on the host, "
               "pinned staging peak %.1f MB; host run %.1f MB of model state on the host, staging "
               "peak %.1f MB\n",
               ns.nvme / 1e6, ns.host / 1e6, ns.host_io_peak / 1e6, hs.host / 1e6,
               hs.host_io_peak / 1e6);
  if (p.a.steal_s >= 0.0)
    std::fprintf(stderr,
                 "  machine CPU per run: NVMe run steal %.2f s, iowait %.2f s; host run steal "
                 "%.2f s, iowait %.2f s\n",
                 p.a.steal_s, p.a.iowait_s, p.b.steal_s, p.b.iowait_s);
  std::fflush(stderr);
  nlohmann::ordered_json extra;
  extra["goal"] = 0.77;
  extra["nvme_run_steal_s"] = round_to(p.a.steal_s, 2);
  extra["nvme_run_iowait_s"] = round_to(p.a.iowait_s, 2);
  extra["host_run_steal_s"] = round_to(p.b.steal_s, 2);
  extra["host_run_iowait_s"] = round_to(p.b.iowait_s, 2);
  extra["nvme_prefetch_hits"] = round_to(p.a.hits, 2);
  extra["nvme_on_demand_fetches"] = round_to(p.a.on_demand, 2);
  extra["nvme_stall_ms"] = round_to(p.a.stall_ms, 3);
  extra["host_prefetch_hits"] = round_to(p.b.hits, 2);
  extra["host_on_demand_fetches"] = round_to(p.b.on_demand, 2);
  extra["host_stall_ms"] = round_to(p.b.stall_ms, 3);
  extra["nvme_state_bytes"] = std::llround(ns.nvme);
  extra["host_state_bytes"] = std::llround(hs.host);
  extra["nvme_run_host_io_peak_bytes"] = std::llround(ns.host_io_peak);
  extra["host_run_host_io_peak_bytes"] = std::llround(hs.host_io_peak);
  extra["swap_buffers"] = o.swap_buffers;
  extra["nvme_run_ms"] = run_medians_json(p.a.run_medians);
  extra["host_run_ms"] = run_medians_json(p.b.run_medians);
  BenchReport report;
  report.emit(result_json("train.nvme_vs_host", p.a.median_ms, "host offload", p.b.median_ms, o, 2,
                          1, repeats, extra));
  return report;
}

BenchReport bench_train_stage3(const BenchTrainModesOptions& o) {
  validate_train_run_options(o);
  const int64_t repeats = repeats_or(o, 2);
  TempDir dir(bench_base_dir(o.dir));
  // Two ranks, so that stage 3's gathers, reduce-scatters and prefetch are measured (on one rank
  // a device-resident shard is the unit itself and nothing is communicated); stage 0 on two ranks
  // is plain data parallelism.
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};
  Mode s3{"stage 3, all on device", "stage3", 2, 1, 3, {}, false, ""};
  Mode s0{"stage 0 (reference)", "stage0", 2, 1, 0, {}, false, ""};
  std::fprintf(stderr,
               "bench train-stage3: %s; 2 ranks x 1 thread, everything on the device tier\n",
               model_text(o).c_str());
  const PairResult p = run_pair(bench, s3, s0, repeats);
  const double ratio = p.b.median_ms / p.a.median_ms;
  std::fprintf(stderr,
               "  %-40s %9.1f ms (prefetch hits %.1f, on-demand %.1f, stall %.2f ms per step)\n",
               "stage 3, median step", p.a.median_ms, p.a.hits, p.a.on_demand, p.a.stall_ms);
  std::fprintf(stderr, "  %-40s %9.1f ms\n", "stage 0, median step (baseline)", p.b.median_ms);
  std::fprintf(stderr, "  %-40s %9.3f (goal >= 0.91, i.e. stage 3 <= 1.1x stage 0): %s\n",
               "ratio stage 0 / stage 3", ratio, ratio >= 0.91 ? "met" : "NOT met");
  std::fflush(stderr);
  nlohmann::ordered_json extra;
  extra["goal"] = 0.91;
  extra["stage3_prefetch_hits"] = round_to(p.a.hits, 2);
  extra["stage3_on_demand_fetches"] = round_to(p.a.on_demand, 2);
  extra["stage3_stall_ms"] = round_to(p.a.stall_ms, 3);
  extra["stage3_run_ms"] = run_medians_json(p.a.run_medians);
  extra["stage0_run_ms"] = run_medians_json(p.b.run_medians);
  BenchReport report;
  report.emit(result_json("train.stage3_vs_stage0", p.a.median_ms, "stage 0", p.b.median_ms, o, 2,
                          1, repeats, extra));
  return report;
}

BenchReport bench_profile_overhead(const BenchTrainModesOptions& o) {
  validate_train_run_options(o);
  const int64_t repeats = repeats_or(o, 3);
  TempDir dir(bench_base_dir(o.dir));
  Bench bench{o, self_exe(), "", dir.path()};
  const nlohmann::ordered_json opt = {{"offload_optimizer", {{"device", "cpu"}}}};
  Mode on{"stage 3, --profile", "on", 1, 2, 3, opt, true, "host"};
  Mode off{"stage 3, no profile", "off", 1, 2, 3, opt, false, "host"};
  std::fprintf(stderr, "bench profile: %s; 1 rank x 2 threads, stage 3, optimizer on the host\n",
               model_text(o).c_str());
  const PairResult p = run_pair(bench, on, off, repeats);
  const double ratio = p.b.median_ms / p.a.median_ms;
  std::vector<double> pair_ratios;
  for (size_t i = 0; i < p.a.run_medians.size(); ++i)
    pair_ratios.push_back(p.b.run_medians[i] / p.a.run_medians[i]);
  std::fprintf(stderr, "  %-40s %9.1f ms (profile file %.0f KiB)\n", "with --profile, median step",
               p.a.median_ms, p.runs_a.front().profile_bytes / 1024.0);
  std::fprintf(stderr, "  %-40s %9.1f ms\n", "without, median step (baseline)", p.b.median_ms);
  std::fprintf(stderr, "  %-40s %9.3f (goal >= 0.98, i.e. on <= 1.02x off): %s\n", "ratio off / on",
               ratio, ratio >= 0.98 ? "met" : "NOT met");
  std::fprintf(stderr, "  %-40s %9.3f\n", "median of the per-pair ratios", median(pair_ratios));
  std::fflush(stderr);
  nlohmann::ordered_json extra;
  extra["goal"] = 0.98;
  extra["pair_ratio_median"] = round_to(median(pair_ratios), 4);
  extra["on_run_ms"] = run_medians_json(p.a.run_medians);
  extra["off_run_ms"] = run_medians_json(p.b.run_medians);
  BenchReport report;
  report.emit(result_json("profile.overhead", p.a.median_ms, "no profile", p.b.median_ms, o, 1, 2,
                          repeats, extra));
  return report;
}

BenchReport bench_train_modes(const BenchTrainModesOptions& o) {
  BenchReport report = bench_train_nvme(o);
  report.append(bench_train_stage3(o));
  report.append(bench_profile_overhead(o));
  return report;
}

}  // namespace tierzero::bench
