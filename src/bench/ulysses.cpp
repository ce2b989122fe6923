// `tierzero bench ulysses` (see ulysses.hpp). Every run is a `tierzero train` child
// (child_runs.hpp) of one small GPT with ulysses_parallel = its size, one rank per slice,
// ZeRO over them:
//   bytes runs: --seq, --steps; each step's all-to-all payload must equal
//     nn::expected_ulysses_traffic x 1 micro-batch, and its call count likewise;
//   fit runs: context --max-seq, --fit-steps, device budget --budget; the estimator's prediction
//     (profile::estimate of the run's own config, with the model's activation count) of the
//     longest multiple of --seq-step that fits, then measured runs from there.
// A fit run that fails says why in its log; only the device budget's refusal counts as "does not
// fit", anything else is an error of the benchmark.
#include "tierzero/bench/ulysses.hpp"

#include "child_runs.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::bench {

namespace {

size_t sz(int64_t v) {
  return static_cast<size_t>(v);
}

// A run's config: Ulysses `sp`, sequence `seq` of a model with context `context`, `steps` steps,
// and with a budget > 0 that device budget.
std::string config_json(const BenchUlyssesOptions& o, int64_t sp, int64_t seq, int64_t context,
                        int64_t steps, int64_t budget) {
  nlohmann::ordered_json c;
  c["train_micro_batch_size_per_gpu"] = o.batch;
  c["gradient_accumulation_steps"] = 1;
  c["zero_optimization"] = {{"stage", o.stage}, {"stage3_param_persistence_threshold", 0}};
  nlohmann::ordered_json t = bench_tierzero_json(o, o.threads);
  t["steps"] = steps;
  t["seq_len"] = seq;
  t["model"]["context_length"] = context;
  t["ulysses_parallel"] = sp;
  t["activation_checkpointing"] = o.checkpointing;
  if (budget > 0) t["device_memory_budget_gb"] = static_cast<double>(budget) / 1073741824.0;
  c["tierzero"] = t;
  set_bench_compute(c, o.compute_dtype);
  return c.dump();
}

// What the estimator predicts the run of `config_text` holds on the device per rank.
size_t predicted_device_bytes(const BenchUlyssesOptions& o, const std::string& config_text,
                              int64_t sp, int64_t seq, int64_t context) {
  const train::TrainConfig c = train::TrainConfig::parse(config_text, "bench ulysses");
  const nn::GPTConfig model = bench_model_config(o, context);
  profile::WorldLayout world;
  world.sp = static_cast<int>(sp);
  const size_t activations =
      train::activation_bytes(model, sz(o.batch), sz(seq), o.checkpointing, world, false, {},
                              dtype_from_name(o.compute_dtype));
  const profile::Estimate e = profile::estimate(train::estimate_input_from(
      c, train::units_from_layout(nn::gpt_param_layout(model), 1), world, activations));
  return e.tier_total(Tier::device);
}

struct Bench {
  const BenchUlyssesOptions& o;
  std::string exe;
  std::string mpiexec;
  std::string dir;

  std::vector<std::string> argv(int64_t sp, const std::string& config, int64_t steps,
                                const std::string& base) const {
    return train_argv(exe, mpiexec, static_cast<int>(sp), config, steps, o.threads, base);
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double device_peak(const std::string& memory_json) {
  const nlohmann::json j = read_memory_report(memory_json);
  try {
    return j.at("tier_peaks").at("device").get<double>();
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("bad memory report " + memory_json + ": " + e.what(), "run the command by hand");
  }
}

nlohmann::ordered_json result(const std::string& bench, double value, const char* unit,
                              const char* baseline, double baseline_value, double ratio,
                              const BenchUlyssesOptions& o, int64_t sp) {
  nlohmann::ordered_json j = bench_result(bench, value, unit, baseline, baseline_value, ratio);
  j["ulysses"] = sp;
  j["ranks"] = sp;
  j["threads"] = o.threads;
  j["stage"] = o.stage;
  j["activation_checkpointing"] = o.checkpointing;
  j["compute_dtype"] = o.compute_dtype;
  j["layers"] = o.layers;
  j["channels"] = o.channels;
  j["heads"] = o.heads;
  j["batch"] = o.batch;
  return j;
}

// Part one at Ulysses size sp: every step's bytes and calls against the analytic volume.
nlohmann::ordered_json bytes_run(const Bench& b, int64_t sp) {
  const BenchUlyssesOptions& o = b.o;
  const nn::GPTConfig model = bench_model_config(o, o.seq);
  const nn::UlyssesTraffic analytic =
      nn::expected_ulysses_traffic(model.num_layers,
                                   nn::ActivationDims::of(model, sz(o.batch), sz(o.seq), 1, false,
                                                          sz(sp), dtype_from_name(o.compute_dtype)),
                                   o.checkpointing);  // x 1 micro-batch per step
  const std::string base = b.dir + "/bytes-sp" + std::to_string(sp);
  write_text_file(base + ".json", config_json(o, sp, o.seq, o.seq, o.steps, 0));
  std::vector<double> ms;
  StepMetrics last;  // the last step of the last run (every step is checked equal to analytic)
  for (int i = 0; i < static_cast<int>(o.repeats); ++i) {
    const std::string run = base + "-" + std::to_string(i);
    const std::vector<std::string> argv = b.argv(sp, base + ".json", o.steps, run);
    if (i == 0)
      std::fprintf(stderr, "  sp %lld: %s\n", static_cast<long long>(sp), join(argv).c_str());
    run_child(argv, child_environment(o.threads), run + ".log", o.timeout_s);
    const std::vector<StepMetrics> steps = read_metrics(run + ".metrics.jsonl", o.steps);
    for (size_t s = 0; s < steps.size(); ++s)
      TZ_CHECK(steps[s].ulysses_all_to_all_bytes == analytic.all_to_all_bytes &&
                   steps[s].ulysses_calls == analytic.calls,
               "ulysses " + std::to_string(sp) + ", run " + std::to_string(i + 1) + ", step " +
                   std::to_string(s + 1) + ": the all-to-alls moved " +
                   std::to_string(steps[s].ulysses_all_to_all_bytes) + " bytes in " +
                   std::to_string(steps[s].ulysses_calls) + " calls, the analytic volume is " +
                   std::to_string(analytic.all_to_all_bytes) + " bytes in " +
                   std::to_string(analytic.calls),
               "the attention's re-shards and nn::expected_ulysses_traffic (docs/ulysses.md) "
               "disagree; one of them is wrong");
    const std::vector<double> counted = counted_ms(steps, o.warmup);
    ms.insert(ms.end(), counted.begin(), counted.end());
    last = steps.back();
  }
  const auto bytes = static_cast<double>(last.ulysses_all_to_all_bytes);
  const double wire = bytes * static_cast<double>(sp - 1) / static_cast<double>(sp);
  const double slice_tokens = static_cast<double>(o.batch * o.seq / sp);
  std::fprintf(stderr,
               "  sp %-3lld seq %-6lld all-to-all bytes/step %12.0f (analytic %12.0f, every step "
               "of %lld run(s) equal) in %zu calls; on the wire per rank %12.0f (%.0f per token "
               "of its slice); step %.1f ms (median)\n",
               static_cast<long long>(sp), static_cast<long long>(o.seq), bytes,
               static_cast<double>(analytic.all_to_all_bytes), static_cast<long long>(o.repeats),
               last.ulysses_calls, wire, wire / slice_tokens, median(ms));
  const auto analytic_bytes = static_cast<double>(analytic.all_to_all_bytes);
  nlohmann::ordered_json j = result("ulysses.sp" + std::to_string(sp) + ".bytes", bytes, "bytes",
                                    "analytic", analytic_bytes, analytic_bytes / bytes, o, sp);
  j["calls"] = last.ulysses_calls;
  j["analytic_calls"] = analytic.calls;
  j["wire_bytes_per_rank"] = round_to(wire, 0);
  j["wire_bytes_per_slice_token"] = round_to(wire / slice_tokens, 1);
  j["seq"] = o.seq;
  j["step_ms"] = round_to(median(ms), 2);
  j["steps"] = o.steps;
  j["warmup"] = o.warmup;
  return j;
}

// One fit run at (sp, seq) under the budget: its device peak, or -1 when the budget refused it.
double fit_run(const Bench& b, int64_t sp, int64_t seq) {
  const BenchUlyssesOptions& o = b.o;
  const std::string base = b.dir + "/fit-sp" + std::to_string(sp) + "-seq" + std::to_string(seq);
  write_text_file(base + ".json", config_json(o, sp, seq, o.max_seq, o.fit_steps, o.budget));
  const std::vector<std::string> argv = b.argv(sp, base + ".json", o.fit_steps, base);
  const ChildOutcome r =
      spawn_child(argv, child_environment(o.threads), base + ".log", o.timeout_s);
  if (r.ok) return device_peak(base + ".memory.json");
  const std::string log = read_all(base + ".log");
  if (log.find("device memory budget exceeded") != std::string::npos) return -1.0;
  std::fprintf(stderr, "  run failed: %s\n  %s; last lines of its output:\n%s", join(argv).c_str(),
               r.why.c_str(), file_tail(base + ".log", 20).c_str());
  TZ_THROW("a fit run " + r.why + " for another reason than the device budget: " + join(argv),
           "its output is shown above; run the command by hand to reproduce");
}

// Part two at Ulysses size sp.
nlohmann::ordered_json fit_search(const Bench& b, int64_t sp) {
  const BenchUlyssesOptions& o = b.o;
  const int64_t step = o.seq_step;
  int64_t predicted = 0;  // the longest multiple of step the estimator fits, 0: none
  size_t predicted_bytes = 0;
  for (int64_t seq = step; seq <= o.max_seq; seq += step) {
    const size_t bytes = predicted_device_bytes(
        o, config_json(o, sp, seq, o.max_seq, o.fit_steps, o.budget), sp, seq, o.max_seq);
    if (bytes > static_cast<size_t>(o.budget)) break;
    predicted = seq;
    predicted_bytes = bytes;
  }
  // Measured: from the prediction (or the first step) up while runs fit, or down until one does.
  int64_t measured = 0;
  double measured_peak = 0.0;
  bool refused_above = false;  // a run one step above `measured` was refused: it is the limit
  std::string tried;
  const auto attempt = [&](int64_t seq) {
    const double peak = fit_run(b, sp, seq);
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
  // Without a refused run just above it, the measured value is a lower bound (the probes or
  // --max-seq ended the search).
  std::fprintf(stderr,
               "  sp %-3lld longest seq: predicted %6lld (device %.2f MiB predicted), measured "
               "%s%lld (device peak %.2f MiB); runs: %s\n",
               static_cast<long long>(sp), static_cast<long long>(predicted),
               static_cast<double>(predicted_bytes) / 1048576.0,
               refused_above ? "" : ">= ", static_cast<long long>(measured),
               measured_peak / 1048576.0, tried.c_str());
  std::fflush(stderr);
  nlohmann::ordered_json j = result(
      "ulysses.sp" + std::to_string(sp) + ".longest_seq", static_cast<double>(measured), "tokens",
      "estimator", static_cast<double>(predicted),
      predicted > 0 ? static_cast<double>(measured) / static_cast<double>(predicted) : 0.0, o, sp);
  j["budget_bytes"] = o.budget;
  j["predicted_device_bytes"] = predicted_bytes;
  j["measured_device_peak_bytes"] = measured_peak;
  j["seq_step"] = step;
  j["max_seq"] = o.max_seq;
  j["limit_found"] = refused_above;
  j["runs"] = tried;
  return j;
}

void validate(const BenchUlyssesOptions& o) {
  validate_train_run_options(o);
  for (const std::vector<int64_t>* list : {&o.sizes, &o.fit_sizes})
    for (int64_t sp : *list) {
      TZ_CHECK(o.heads % sp == 0,
               "--heads " + std::to_string(o.heads) + " is not divisible by Ulysses size " +
                   std::to_string(sp),
               "each rank attends over whole heads: choose sizes that divide --heads");
      TZ_CHECK(o.seq % sp == 0 && o.seq_step % sp == 0,
               "--seq " + std::to_string(o.seq) + " and --seq-step " + std::to_string(o.seq_step) +
                   " must be multiples of Ulysses size " + std::to_string(sp),
               "each rank holds an equal slice of every sequence");
    }
  TZ_CHECK(o.fit_steps >= 1 && o.probes >= 0 && o.seq_step >= 1 && o.max_seq >= o.seq_step,
           "--fit-steps, --probes, --seq-step, --max-seq out of range",
           "for example: --fit-steps 2 --probes 3 --seq-step 64 --max-seq 4096");
}

}  // namespace

BenchReport bench_ulysses(const BenchUlyssesOptions& o) {
  validate(o);
  TempDir dir(bench_base_dir(o.dir));
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};
  std::fprintf(stderr,
               "bench ulysses: GPT %lld layers x %lld channels, %lld heads, vocab %lld; "
               "micro-batch %lld; %lld thread(s) per rank, ZeRO stage %lld%s\n",
               static_cast<long long>(o.layers), static_cast<long long>(o.channels),
               static_cast<long long>(o.heads), static_cast<long long>(kBenchVocab),
               static_cast<long long>(o.batch), static_cast<long long>(o.threads),
               static_cast<long long>(o.stage),
               o.checkpointing ? ", activation checkpointing" : "");
  std::fprintf(stderr,
               " all-to-all bytes per step, seq %lld, %lld steps per run (first %lld not timed), "
               "%lld run(s) per size:\n",
               static_cast<long long>(o.seq), static_cast<long long>(o.steps),
               static_cast<long long>(o.warmup), static_cast<long long>(o.repeats));
  std::vector<nlohmann::ordered_json> results;
  for (int64_t sp : o.sizes) results.push_back(bytes_run(bench, sp));
  std::fprintf(stderr,
               " longest sequence (a multiple of %lld, at most %lld) under a device budget of "
               "%.2f MiB, %lld step(s) per run:\n",
               static_cast<long long>(o.seq_step), static_cast<long long>(o.max_seq),
               static_cast<double>(o.budget) / 1048576.0, static_cast<long long>(o.fit_steps));
  for (int64_t sp : o.fit_sizes) results.push_back(fit_search(bench, sp));
  BenchReport report;
  for (const auto& j : results) report.emit(j);
  return report;
}

}  // namespace tierzero::bench
