// What the benchmarks of real `tierzero train` runs share (train_modes.cpp, tp.cpp, pp.cpp, ...):
// a private temp directory, this binary's path, the MPI launcher, the child's environment, running
// a child process with a timeout and its output in a log, the argv of one `tierzero train` run,
// reading back its --metrics and --memory-json files, and the options they all take (the model,
// the run length, the launcher). Each benchmark keeps only its own modes, configs and tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/bench/results.hpp"
#include "tierzero/bench/train_run_options.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::bench {

// The vocabulary of the built-in corpus's byte-level tokenizer (256 bytes + EOT): the benchmarks'
// models.
constexpr int64_t kBenchVocab = 257;
// The "tierzero" section every benchmark run shares: o.steps, seq_len and context o.seq, seed 7,
// `threads`, no validation, and the model of the options' shape with kBenchVocab; each benchmark
// adds its own keys.
nlohmann::ordered_json bench_tierzero_json(const TrainRunOptions& o, int64_t threads);
// A run's config `c` computing in `compute_dtype` (fp32, bf16 or fp16): a 16-bit one also turns
// that working type on ("bf16" / "fp16" enabled), 16-bit compute running on the working copy.
void set_bench_compute(nlohmann::ordered_json& c, const std::string& compute_dtype);
// The GPT of the options' shape with kBenchVocab and `context` positions, padded as the trainer
// pads it (what the runs of bench_tierzero_json train).
nn::GPTConfig bench_model_config(const TrainRunOptions& o, int64_t context);

double median(std::vector<double> v);  // 0 for an empty v
double mean(const std::vector<double>& v);
std::string join(const std::vector<std::string>& argv);  // space-separated

// A private directory `base`/tierzero-bench-train-XXXXXX for configs, metrics, logs and NVMe swap;
// removed (with all it holds) when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& base);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `given` when not empty, else the first of /var/tmp and . that is writable and not a tmpfs.
std::string bench_base_dir(const std::string& given);

std::string self_exe();                              // this program's path, from /proc/self/exe
std::string find_mpiexec(const std::string& given);  // `given`, or mpiexec on PATH

// The child's environment: ours without launcher and thread-count variables (a bench started
// under mpiexec must not hand its rank to the child), plus Open MPI's settings for running as
// root on one oversubscribed machine with shared memory, and the run's thread count.
std::vector<std::string> child_environment(int64_t threads);

// How a child run ended: ok (exit status 0), else why not ("exited with status 1", "ran past
// 600 s and was killed", ...); its wall time in seconds.
struct ChildOutcome {
  bool ok = false;
  std::string why;
  double seconds = 0.0;
};

// Runs argv (argv[0] a path) with stdin from /dev/null and stdout + stderr into `log`, and waits
// at most timeout_s (then SIGTERM, SIGKILL 5 s later). It stays in our process group, so Ctrl-C
// reaches it (and mpiexec's ranks). Throws Error only when it cannot be started.
ChildOutcome spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& log, int64_t timeout_s);
// spawn_child that must succeed: throws Error (after printing the log's tail) unless the run
// exits with status 0. Returns the wall time in seconds.
double run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const std::string& log, int64_t timeout_s);
// The last `lines` lines of a file (a failed run's log).
std::string file_tail(const std::string& path, size_t lines);

// The argv of one `tierzero train` run of `exe` with `config`, `steps` and `threads`, writing
// base.metrics.jsonl and base.memory.json; under `mpiexec -n ranks --oversubscribe --bind-to none`
// when ranks > 1.
std::vector<std::string> train_argv(const std::string& exe, const std::string& mpiexec, int ranks,
                                    const std::string& config, int64_t steps, int64_t threads,
                                    const std::string& base);

// Writes `text` and a newline to `path`; throws Error when it cannot.
void write_text_file(const std::string& path, const std::string& text);

// One line of a --metrics file (rank 0's step).
struct StepMetrics {
  double ms = 0.0;
  double prefetch_hits = 0.0;
  double on_demand_fetches = 0.0;
  double stall_ms = 0.0;
  // The tensor-parallel collectives' payload bytes of the step (0 without tensor parallelism).
  size_t tp_all_reduce_bytes = 0;
  size_t tp_all_gather_bytes = 0;
  size_t tp_reduce_scatter_bytes = 0;
  // Pipeline parallelism: the stages' mean bubble fraction and stage 0's executor times (-1 and 0
  // without pipeline parallelism).
  double pp_bubble = -1.0;
  double pp_step_ms = 0.0;
  double pp_compute_ms = 0.0;
  // Ulysses: the all-to-alls' payload bytes and calls of the step (0 without Ulysses).
  size_t ulysses_all_to_all_bytes = 0;
  size_t ulysses_calls = 0;
};

// The steps of a --metrics file; throws Error unless it has exactly `steps` well-formed lines.
std::vector<StepMetrics> read_metrics(const std::string& path, int64_t steps);

// The milliseconds of steps[warmup..], the steps a benchmark counts.
std::vector<double> counted_ms(const std::vector<StepMetrics>& steps, int64_t warmup);

// The JSON result lines (those starting with '{') a child benchmark printed to its log.
std::vector<nlohmann::json> read_result_lines(const std::string& log);
// The baseline_value of the line of `bench` among `lines`, or `field` of it when given; throws
// Error naming the log when the child printed no such line.
double result_baseline(const std::vector<nlohmann::json>& lines, const std::string& bench,
                       const std::string& log, const std::string& field = "baseline_value");

// A --memory-json report, parsed; throws Error when it is missing or not JSON.
nlohmann::json read_memory_report(const std::string& path);

}  // namespace tierzero::bench
