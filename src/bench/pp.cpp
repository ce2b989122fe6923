// `tierzero bench pp` (see pp.hpp): one mode per (schedule, micro-batches), each a real
// pipeline-parallel `tierzero train` run on pp ranks, repeated and alternated; the measured bubble
// is the median over the timed steps of all runs of the stages' mean idle fraction (--metrics'
// pp_bubble), the analytic one nn::analytic_bubble_fraction.
#include "tierzero/bench/pp.hpp"

#include "child_runs.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/pp/pipeline_schedule.hpp"

namespace tierzero::bench {

namespace {

struct PpMode {
  std::string schedule;
  int64_t micro_batches = 1;
  double analytic = 0.0;  // bubble fraction of uniform stages
  std::string tag() const { return schedule + "-m" + std::to_string(micro_batches); }
};

struct PpSummary {
  double bubble = 0.0;       // median over the timed steps of all runs
  double step_ms = 0.0;      // median step time (the whole optimizer step, rank 0)
  double pipe_ms = 0.0;      // median of stage 0's executor time
  double compute_ms = 0.0;   // median of stage 0's compute time
  std::vector<double> runs;  // each run's median bubble
};

std::string config_json(const BenchPpOptions& o, const PpMode& m) {
  nlohmann::ordered_json c;
  c["train_micro_batch_size_per_gpu"] = o.batch;
  c["gradient_accumulation_steps"] = m.micro_batches;
  c["zero_optimization"] = {{"stage", 0}};
  nlohmann::ordered_json t = bench_tierzero_json(o, o.threads);
  t["pipeline_parallel"] = o.pp;
  t["pipeline_schedule"] = m.schedule;
  t["pipeline_virtual_stages"] = m.schedule == "interleaved" ? o.virtual_stages : 1;
  t["pipeline_receive_ahead"] = o.receive_ahead;
  c["tierzero"] = t;
  return c.dump();
}

PpSummary summarize(const std::vector<std::vector<StepMetrics>>& runs, int64_t warmup) {
  PpSummary s;
  std::vector<double> bubble, step, pipe, compute;
  for (const std::vector<StepMetrics>& r : runs) {
    std::vector<double> run_bubble;
    for (size_t i = static_cast<size_t>(warmup); i < r.size(); ++i) {
      TZ_CHECK(r[i].pp_bubble >= 0.0, "a pipeline run's metrics have no pp_bubble",
               "internal error: the trainer writes it for every pipeline step");
      run_bubble.push_back(r[i].pp_bubble);
      step.push_back(r[i].ms);
      pipe.push_back(r[i].pp_step_ms);
      compute.push_back(r[i].pp_compute_ms);
    }
    bubble.insert(bubble.end(), run_bubble.begin(), run_bubble.end());
    s.runs.push_back(median(run_bubble));
  }
  s.bubble = median(bubble);
  s.step_ms = median(step);
  s.pipe_ms = median(pipe);
  s.compute_ms = median(compute);
  return s;
}

void validate(const BenchPpOptions& o) {
  validate_train_run_options(o);
  TZ_CHECK(o.pp >= 2 && o.pp <= o.layers,
           "--pp " + std::to_string(o.pp) + " must be at least 2 and at most --layers " +
               std::to_string(o.layers),
           "every stage holds at least one block; for example --pp 2 --layers 8");
  TZ_CHECK(!o.micro_batches.empty() && !o.schedules.empty(), "nothing to measure",
           "give --micro-batches and --schedules");
}

}  // namespace

BenchReport bench_pp(const BenchPpOptions& o) {
  validate(o);
  std::vector<PpMode> modes;
  for (const std::string& schedule : o.schedules)
    for (int64_t m : o.micro_batches) {
      nn::PipelineShape shape;
      shape.stages = static_cast<size_t>(o.pp);
      shape.micro_batches = static_cast<size_t>(m);
      shape.schedule = nn::pipeline_schedule_from_name(schedule);
      if (schedule == "interleaved") {
        shape.chunks = static_cast<size_t>(o.virtual_stages);
        TZ_CHECK(o.pp * o.virtual_stages <= o.layers,
                 "--pp " + std::to_string(o.pp) + " x --virtual-stages " +
                     std::to_string(o.virtual_stages) + " exceeds --layers " +
                     std::to_string(o.layers),
                 "every virtual stage holds at least one block");
      }
      nn::validate(shape);
      modes.push_back({schedule, m, nn::analytic_bubble_fraction(shape)});
    }
  TempDir dir(bench_base_dir(o.dir));
  const std::string exe = self_exe(), mpiexec = find_mpiexec(o.mpiexec);
  std::fprintf(stderr,
               "bench pp: GPT %lld layers x %lld channels, %lld heads, vocab %lld, seq %lld, "
               "micro-batch %lld; %lld stages on %lld ranks x %lld thread(s), ZeRO stage 0; "
               "%lld steps per run (first %lld not timed), %lld runs per mode, alternating\n",
               static_cast<long long>(o.layers), static_cast<long long>(o.channels),
               static_cast<long long>(o.heads), static_cast<long long>(kBenchVocab),
               static_cast<long long>(o.seq), static_cast<long long>(o.batch),
               static_cast<long long>(o.pp), static_cast<long long>(o.pp),
               static_cast<long long>(o.threads), static_cast<long long>(o.steps),
               static_cast<long long>(o.warmup), static_cast<long long>(o.repeats));
  const auto config_path = [&](const PpMode& m) { return dir.path() + "/" + m.tag() + ".json"; };
  const auto argv = [&](const PpMode& m, int i) {
    return train_argv(exe, mpiexec, static_cast<int>(o.pp), config_path(m), o.steps, o.threads,
                      dir.path() + "/" + m.tag() + "-" + std::to_string(i));
  };
  for (const PpMode& m : modes) write_text_file(config_path(m), config_json(o, m));
  std::fprintf(stderr, "  e.g. %s\n    config: %s\n", join(argv(modes.front(), 0)).c_str(),
               config_json(o, modes.front()).c_str());
  std::fprintf(stderr, "  %-8s %4s %3s %10s %10s %10s\n", "schedule", "m", "run", "bubble",
               "analytic", "step ms");
  std::vector<std::vector<std::vector<StepMetrics>>> runs(modes.size());
  for (int i = 0; i < static_cast<int>(o.repeats); ++i)
    for (size_t k = 0; k < modes.size(); ++k) {
      const std::string base = dir.path() + "/" + modes[k].tag() + "-" + std::to_string(i);
      run_child(argv(modes[k], i), child_environment(o.threads), base + ".log", o.timeout_s);
      runs[k].push_back(read_metrics(base + ".metrics.jsonl", o.steps));
      const PpSummary one = summarize({runs[k].back()}, o.warmup);
      std::fprintf(stderr, "  %-8s %4lld %3d %10.4f %10.4f %10.1f\n", modes[k].schedule.c_str(),
                   static_cast<long long>(modes[k].micro_batches), i + 1, one.bubble,
                   modes[k].analytic, one.step_ms);
      std::fflush(stderr);
    }
  std::fprintf(stderr,
               "  bubble = the part of the pipeline's step (until its last stage is done) a stage "
               "did not compute, mean over the stages, median over the timed steps of all runs; "
               "analytic (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1):\n");
  BenchReport report;
  for (size_t k = 0; k < modes.size(); ++k) {
    const PpMode& m = modes[k];
    const PpSummary s = summarize(runs[k], o.warmup);
    std::fprintf(stderr,
                 "  %-8s m %-3lld measured %.4f analytic %.4f ratio %.3f (stage 0: %.1f ms "
                 "compute of %.1f ms in the pipeline, step %.1f ms)\n",
                 m.schedule.c_str(), static_cast<long long>(m.micro_batches), s.bubble, m.analytic,
                 s.bubble / m.analytic, s.compute_ms, s.pipe_ms, s.step_ms);
    nlohmann::ordered_json j = bench_result(
        "pp." + m.schedule + ".m" + std::to_string(m.micro_batches) + ".bubble",
        round_to(s.bubble, 4), "fraction of the step",
        m.schedule == "interleaved" ? "analytic (p-1)/(v*m+p-1)" : "analytic (p-1)/(m+p-1)",
        round_to(m.analytic, 4), s.bubble / m.analytic);
    std::vector<double> run_bubbles;
    for (double x : s.runs) run_bubbles.push_back(round_to(x, 4));
    j["run_bubbles"] = run_bubbles;
    j["step_ms"] = round_to(s.step_ms, 2);
    j["stage0_pipeline_ms"] = round_to(s.pipe_ms, 2);
    j["stage0_compute_ms"] = round_to(s.compute_ms, 2);
    j["pp"] = o.pp;
    j["micro_batches"] = m.micro_batches;
    j["schedule"] = m.schedule;
    j["virtual_stages"] = m.schedule == "interleaved" ? o.virtual_stages : 1;
    j["threads"] = o.threads;
    j["layers"] = o.layers;
    j["channels"] = o.channels;
    j["heads"] = o.heads;
    j["seq"] = o.seq;
    j["batch"] = o.batch;
    j["steps"] = o.steps;
    j["warmup"] = o.warmup;
    j["repeats"] = o.repeats;
    j["receive_ahead"] = o.receive_ahead;
    report.emit(j);
  }
  return report;
}

}  // namespace tierzero::bench
