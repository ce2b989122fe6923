// `tierzero bench activations` (see include/tierzero/bench/activations.hpp). Every run is a
// one-rank `tierzero train` child (child_runs.hpp) of one small GPT with activation checkpointing,
// its checkpoints on `tier` (tierzero.activation_checkpoints). A fit run that fails counts as "does
// not fit" only when the device budget refused it; anything else is an error of the benchmark.
#include "tierzero/bench/activations.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_runs.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::bench {

namespace {

const char* const kTiers[] = {"device", "cpu", "nvme"};

const char* tier_label(const std::string& tier) {
  return tier == "cpu" ? "host" : tier.c_str();
}

struct Bench {
  const BenchActivationsOptions& o;
  std::string exe;
  std::string dir;
};

// A run's config: checkpoints on `tier`, sequence `seq`, context `context`, `steps` steps and,
// with budget > 0, that device budget.
std::string config_json(const Bench& b, const std::string& tier, int64_t seq, int64_t context,
                        int64_t steps, int64_t budget) {
  const BenchActivationsOptions& o = b.o;
  nlohmann::ordered_json c;
  c["train_micro_batch_size_per_gpu"] = o.batch;
  c["zero_optimization"] = {{"stage", o.stage}};
  nlohmann::ordered_json t = bench_tierzero_json(o, o.threads);
  t["steps"] = steps;
  t["seq_len"] = seq;
  t["model"]["context_length"] = context;
  t["activation_checkpointing"] = true;
  t["activation_checkpoints"] = {
      {"device", tier}, {"nvme_path", b.dir}, {"buffer_count", o.buffer_count}};
  if (budget > 0) t["device_memory_budget_gb"] = static_cast<double>(budget) / 1073741824.0;
  c["tierzero"] = t;
  return c.dump();
}

// The estimator's device bytes for the run of `text` (the trainer's own prediction).
size_t predicted_device_bytes(const Bench& b, const std::string& text, int64_t seq,
                              int64_t context) {
  const train::TrainConfig c = train::TrainConfig::parse(text, "bench activations");
  const nn::GPTConfig model = bench_model_config(b.o, context);
  const train::ActivationEstimate a = train::activation_estimate(
      model,
      nn::ActivationDims::of(model, static_cast<size_t>(b.o.batch), static_cast<size_t>(seq), 1,
                             false, 1),
      {}, nn::PipelineSchedule::one_f_one_b, 1, nn::Recompute(nn::Recompute::full),
      train::checkpoint_tier_of(c.activation_checkpoints),
      static_cast<size_t>(c.activation_checkpoints.buffer_count));
  profile::EstimateInput in = train::estimate_input_from(
      c, train::units_from_layout(nn::gpt_param_layout(model), 1), {}, a.activation_bytes);
  in.checkpoints = a.checkpoints;
  return profile::estimate(in).tier_total(Tier::device);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double device_peak(const std::string& memory_json) {
  try {
    return read_memory_report(memory_json).at("tier_peaks").at("device").get<double>();
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("bad memory report " + memory_json + ": " + e.what(), "run the command by hand");
  }
}

// One fit run under the budget: its device peak, or -1 when the budget refused it.
double fit_run(const Bench& b, const std::string& tier, int64_t seq) {
  const BenchActivationsOptions& o = b.o;
  const std::string base = b.dir + "/fit-" + tier + "-seq" + std::to_string(seq);
  write_text_file(base + ".json", config_json(b, tier, seq, o.max_seq, o.fit_steps, o.budget));
  const std::vector<std::string> argv =
      train_argv(b.exe, "", 1, base + ".json", o.fit_steps, o.threads, base);
  const ChildOutcome r =
      spawn_child(argv, child_environment(o.threads), base + ".log", o.timeout_s);
  if (r.ok) return device_peak(base + ".memory.json");
  if (read_all(base + ".log").find("device memory budget exceeded") != std::string::npos)
    return -1.0;
  std::fprintf(stderr, "  run failed: %s\n  %s; last lines of its output:\n%s", join(argv).c_str(),
               r.why.c_str(), file_tail(base + ".log", 20).c_str());
  TZ_THROW("a fit run " + r.why + " for another reason than the device budget: " + join(argv),
           "its output is shown above; run the command by hand to reproduce");
}

nlohmann::ordered_json result(const Bench& b, const std::string& name, double value,
                              const char* unit, const char* baseline, double baseline_value,
                              double ratio) {
  const BenchActivationsOptions& o = b.o;
  nlohmann::ordered_json j = bench_result(name, value, unit, baseline, baseline_value, ratio);
  j["threads"] = o.threads;
  j["stage"] = o.stage;
  j["layers"] = o.layers;
  j["channels"] = o.channels;
  j["heads"] = o.heads;
  j["batch"] = o.batch;
  j["buffer_count"] = o.buffer_count;
  return j;
}

// Part one for one placement.
nlohmann::ordered_json fit_search(const Bench& b, const std::string& tier) {
  const BenchActivationsOptions& o = b.o;
  const int64_t step = o.seq_step;
  int64_t predicted = 0;
  size_t predicted_bytes = 0;
  for (int64_t seq = step; seq <= o.max_seq; seq += step) {
    const size_t bytes = predicted_device_bytes(
        b, config_json(b, tier, seq, o.max_seq, o.fit_steps, o.budget), seq, o.max_seq);
    if (bytes > static_cast<size_t>(o.budget)) break;
    predicted = seq;
    predicted_bytes = bytes;
  }
  int64_t measured = 0;
  double measured_peak = 0.0;
  bool refused_above = false;
  std::string tried;
  const auto attempt = [&](int64_t seq) {
    const double peak = fit_run(b, tier, seq);
    tried += (tried.empty() ? "" : ", ") + std::to_string(seq) + (peak >= 0 ? " fits" : " refused");
    if (peak >= 0 && seq > measured) {
      measured = seq;
      measured_peak = peak;
    }
    if (peak < 0 && seq == measured + step) refused_above = true;
    return peak >= 0;
  };
  const int64_t start = predicted > 0 ? predicted : step;
  if (attempt(start)) {
    for (int64_t k = 1; k <= o.probes && start + k * step <= o.max_seq; ++k)
      if (!attempt(start + k * step)) break;
  } else {
    for (int64_t seq = start - step; seq >= step && start - seq <= o.probes * step; seq -= step)
      if (attempt(seq)) break;
  }
  std::fprintf(stderr,
               "  checkpoints on %-6s longest seq: predicted %5lld (device %.2f MiB), measured "
               "%s%lld (device peak %.2f MiB); runs: %s\n",
               tier_label(tier), static_cast<long long>(predicted),
               static_cast<double>(predicted_bytes) / 1048576.0,
               refused_above ? "" : ">= ", static_cast<long long>(measured),
               measured_peak / 1048576.0, tried.c_str());
  std::fflush(stderr);
  nlohmann::ordered_json j =
      result(b, std::string("activations.") + tier_label(tier) + ".longest_seq",
             static_cast<double>(measured), "tokens", "estimator", static_cast<double>(predicted),
             predicted > 0 ? static_cast<double>(measured) / static_cast<double>(predicted) : 0.0);
  j["budget_bytes"] = o.budget;
  j["predicted_device_bytes"] = predicted_bytes;
  j["measured_device_peak_bytes"] = measured_peak;
  j["limit_found"] = refused_above;
  j["runs"] = tried;
  return j;
}

// Part two: median counted step time at o.seq for one placement, runs alternating with the others.
std::vector<double> step_times(const Bench& b, const std::string& tier, int run) {
  const BenchActivationsOptions& o = b.o;
  const std::string base = b.dir + "/time-" + tier + "-" + std::to_string(run);
  write_text_file(base + ".json", config_json(b, tier, o.seq, o.seq, o.steps, 0));
  const std::vector<std::string> argv =
      train_argv(b.exe, "", 1, base + ".json", o.steps, o.threads, base);
  if (run == 0) std::fprintf(stderr, "  %s\n", join(argv).c_str());
  run_child(argv, child_environment(o.threads), base + ".log", o.timeout_s);
  return counted_ms(read_metrics(base + ".metrics.jsonl", o.steps), o.warmup);
}

}  // namespace

int bench_activations(const BenchActivationsOptions& o) {
  validate_train_run_options(o);
  TZ_CHECK(o.seq_step >= 1 && o.max_seq >= o.seq_step && o.seq <= o.max_seq,
           "--seq-step, --max-seq and --seq out of range",
           "for example: --seq 256 --seq-step 64 --max-seq 2048");
  TempDir dir(bench_base_dir(o.dir));
  Bench b{o, self_exe(), dir.path()};
  std::fprintf(stderr,
               "bench activations: GPT %lld layers x %lld channels, %lld heads; micro-batch %lld; "
               "%lld thread(s), ZeRO stage %lld, activation checkpointing, %lld device slots\n",
               static_cast<long long>(o.layers), static_cast<long long>(o.channels),
               static_cast<long long>(o.heads), static_cast<long long>(o.batch),
               static_cast<long long>(o.threads), static_cast<long long>(o.stage),
               static_cast<long long>(o.buffer_count));
  std::fprintf(stderr,
               " longest sequence (a multiple of %lld, at most %lld) under a device budget of "
               "%.2f MiB:\n",
               static_cast<long long>(o.seq_step), static_cast<long long>(o.max_seq),
               static_cast<double>(o.budget) / 1048576.0);
  std::vector<nlohmann::ordered_json> results;
  for (const char* tier : kTiers) results.push_back(fit_search(b, tier));
  std::fprintf(stderr,
               " step time at seq %lld, %lld steps per run (first %lld not timed), %lld "
               "runs per placement, alternating:\n",
               static_cast<long long>(o.seq), static_cast<long long>(o.steps),
               static_cast<long long>(o.warmup), static_cast<long long>(o.repeats));
  std::vector<std::vector<double>> ms(3);
  for (int run = 0; run < static_cast<int>(o.repeats); ++run)
    for (size_t t = 0; t < 3; ++t) {
      const std::vector<double> m = step_times(b, kTiers[t], run);
      ms[t].insert(ms[t].end(), m.begin(), m.end());
    }
  const double device_ms = median(ms[0]);
  std::fprintf(stderr, "  checkpoints on device  step %.1f ms (median)\n", device_ms);
  for (size_t t = 1; t < 3; ++t) {
    const double tier_ms = median(ms[t]);
    std::fprintf(stderr, "  checkpoints on %-6s  step %.1f ms (median), %.3f x the device's\n",
                 tier_label(kTiers[t]), tier_ms, tier_ms / device_ms);
    nlohmann::ordered_json j =
        result(b, std::string("activations.") + tier_label(kTiers[t]) + "_vs_device", tier_ms, "ms",
               "device checkpoints", device_ms, device_ms / tier_ms);
    j["seq"] = o.seq;
    j["steps"] = o.steps;
    j["warmup"] = o.warmup;
    j["repeats"] = o.repeats;
    results.push_back(j);
  }
  for (const auto& j : results) print_result(j);
  return 0;
}

}  // namespace tierzero::bench
