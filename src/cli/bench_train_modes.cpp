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
// model state really was, and a run that did not offload where it should is an error.
#include "bench_train_modes.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "machine_cpu_times.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/timer.hpp"

extern char** environ;

namespace tierzero::cli {

namespace {

constexpr long kTmpfsMagic = 0x01021994;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

bool usable_disk_dir(const std::string& dir) {
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return false;
  return static_cast<long>(fs.f_type) != kTmpfsMagic && access(dir.c_str(), W_OK) == 0;
}

// A private directory for configs, metrics, logs and NVMe swap; removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string templ = base + "/tierzero-bench-train-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      TZ_THROW("cannot create a benchmark directory in " + base + ": " + errno_string(),
               "pass --dir with a writable directory on a real disk");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string self_exe() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  TZ_CHECK(!ec, "cannot find this program's path (/proc/self/exe): " + ec.message(),
           "run on Linux with /proc mounted");
  return p.string();
}

std::string find_mpiexec(const std::string& given) {
  if (!given.empty()) {
    TZ_CHECK(access(given.c_str(), X_OK) == 0, "--mpiexec " + given + " is not an executable",
             "pass the full path of mpiexec");
    return given;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string d;
  while (std::getline(dirs, d, ':')) {
    if (d.empty()) continue;
    const std::string candidate = d + "/mpiexec";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  TZ_THROW("mpiexec not found on PATH; this benchmark runs 2 ranks",
           "install Open MPI (apt-get install openmpi-bin) or pass --mpiexec PATH");
}

// The child's environment: ours without launcher and thread-count variables (a bench started
// under mpiexec must not hand its rank to the child), plus Open MPI's settings for running as
// root on one oversubscribed machine with shared memory, and the run's thread count.
std::vector<std::string> child_environment(int64_t threads) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto starts = [&](const char* p) { return kv.rfind(p, 0) == 0; };
    if (starts("OMPI_") || starts("PMIX_") || starts("PRTE_") || starts("OMP_NUM_THREADS=") ||
        starts("OPENBLAS_NUM_THREADS="))
      continue;
    env.push_back(kv);
  }
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  env.emplace_back("OMPI_MCA_btl=self,vader");
  env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  env.emplace_back("OPENBLAS_NUM_THREADS=1");
  return env;
}

std::string file_tail(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.erase(lines.begin());
  }
  std::string s;
  for (const auto& l : lines) s += "    | " + l + "\n";
  return s;
}

// Runs argv (argv[0] a path) with stdin from /dev/null and stdout + stderr into `log`, and waits
// at most timeout_s. It stays in our process group, so Ctrl-C reaches it (and mpiexec's ranks).
// Throws Error (after printing the log's tail) unless it exits with status 0. Returns the wall time
// in seconds.
double run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const std::string& log, int64_t timeout_s) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  int rc = posix_spawn_file_actions_init(&actions);
  TZ_CHECK(rc == 0, std::string("posix_spawn_file_actions_init: ") + std::strerror(rc), "");
  std::unique_ptr<posix_spawn_file_actions_t, int (*)(posix_spawn_file_actions_t*)> actions_guard(
      &actions, &posix_spawn_file_actions_destroy);
  rc = posix_spawnattr_init(&attr);
  TZ_CHECK(rc == 0, std::string("posix_spawnattr_init: ") + std::strerror(rc), "");
  std::unique_ptr<posix_spawnattr_t, int (*)(posix_spawnattr_t*)> attr_guard(
      &attr, &posix_spawnattr_destroy);
  const auto check = [](int r, const char* what) {
    TZ_CHECK(r == 0, std::string(what) + ": " + std::strerror(r), "see the OS error");
  };
  check(posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0),
        "posix_spawn_file_actions_addopen /dev/null");
  check(posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644),
        "posix_spawn_file_actions_addopen log");
  check(posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO),
        "posix_spawn_file_actions_adddup2");

  std::vector<char*> args;  // (argv.size() + 1) null-terminated
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;  // (env.size() + 1) null-terminated
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  std::fflush(stderr);
  std::fflush(stdout);
  Timer wall;
  pid_t pid = 0;
  rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  TZ_CHECK(rc == 0, "cannot start " + join(argv) + ": " + std::strerror(rc),
           "check that the program exists and is executable");

  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno == EINTR) continue;
    TZ_CHECK_ERRNO(w, "waitpid for " + argv[0]);
    if (!timed_out && wall.seconds() > static_cast<double>(timeout_s)) {
      timed_out = true;
      kill(pid, SIGTERM);  // mpiexec passes it on to its ranks
      bool reaped = false;
      for (int i = 0; i < 100 && !reaped; ++i) {  // 5 s to end cleanly
        reaped = waitpid(pid, &status, WNOHANG) == pid;
        if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!reaped) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = wall.seconds();
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = timed_out ? "ran past " + std::to_string(timeout_s) + " s and was killed"
                      : WIFEXITED(status)
                          ? "exited with status " + std::to_string(WEXITSTATUS(status))
                          : "was killed by signal " + std::to_string(WTERMSIG(status));
    std::fprintf(stderr, "  run failed: %s\n  %s; last lines of its output:\n%s",
                 join(argv).c_str(), why.c_str(), file_tail(log, 20).c_str());
    std::fflush(stderr);
    TZ_THROW("a benchmark run " + why + ": " + join(argv),
             "its output is shown above; run the command by hand to reproduce");
  }
  return seconds;
}

struct StepMetrics {
  double ms = 0.0;
  double prefetch_hits = 0.0;
  double on_demand_fetches = 0.0;
  double stall_ms = 0.0;
};

std::vector<StepMetrics> read_metrics(const std::string& path, int64_t steps) {
  std::ifstream in(path);
  TZ_CHECK(in.good(), "the run wrote no metrics file " + path, "run the command by hand");
  std::vector<StepMetrics> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      StepMetrics m;
      m.ms = j.at("ms").get<double>();
      m.prefetch_hits = j.value("prefetch_hits", 0.0);
      m.on_demand_fetches = j.value("on_demand_fetches", 0.0);
      m.stall_ms = j.value("stall_ms", 0.0);
      out.push_back(m);
    } catch (const nlohmann::json::exception& e) {
      TZ_THROW("bad line in the metrics file " + path + ": " + e.what(), "line: " + line);
    }
  }
  TZ_CHECK(static_cast<int64_t>(out.size()) == steps,
           "the metrics file " + path + " has " + std::to_string(out.size()) + " steps, expected " +
               std::to_string(steps),
           "run the command by hand");
  return out;
}

// Model state (param + grad + optimizer, current) of rank 0 on each tier, from --memory-json.
struct StateBytes {
  double device = 0.0, host = 0.0, nvme = 0.0;
  double host_io_peak = 0.0;  // pinned staging (NVMe slots, reads, handoffs, bounce buffers)
};
StateBytes read_state_bytes(const std::string& path) {
  std::ifstream in(path);
  TZ_CHECK(in.good(), "the run wrote no memory report " + path, "run the command by hand");
  StateBytes b;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
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
  std::string label;        // in the table
  std::string tag;          // in file names
  int ranks = 1;            // > 1: under mpiexec
  int64_t threads = 1;      // OpenMP threads per rank
  int stage = 0;            // ZeRO stage
  std::string offload;      // extra zero_optimization keys, each starting with ", "
  bool profile = false;     // pass --profile
  std::string expect_tier;  // "nvme" or "host": most of the model state must be there
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
    char buf[4096];
    const int n = std::snprintf(
        buf, sizeof buf,
        "{\"train_micro_batch_size_per_gpu\": %lld, \"zero_optimization\": {\"stage\": %d, "
        "\"stage3_param_persistence_threshold\": 0%s}, \"tierzero\": {\"steps\": %lld, "
        "\"seq_len\": %lld, \"seed\": 7, \"threads\": %lld, \"val_batches\": 0, \"model\": "
        "{\"vocab_size\": 257, \"n_layer\": %lld, \"n_head\": %lld, \"n_embd\": %lld, "
        "\"context_length\": %lld}}}",
        static_cast<long long>(o.batch), m.stage, m.offload.c_str(),
        static_cast<long long>(o.steps), static_cast<long long>(o.seq),
        static_cast<long long>(m.threads), static_cast<long long>(o.layers),
        static_cast<long long>(o.heads), static_cast<long long>(o.channels),
        static_cast<long long>(o.seq));
    TZ_CHECK(n > 0 && static_cast<size_t>(n) < sizeof buf, "config too long for the benchmark",
             "pass a shorter --dir");
    return buf;
  }

  std::string config_path(const Mode& m) const { return dir + "/" + m.tag + ".json"; }

  std::vector<std::string> argv(const Mode& m, int index) const {
    const std::string base = dir + "/" + m.tag + "-" + std::to_string(index);
    std::vector<std::string> a;
    if (m.ranks > 1)
      a = {mpiexec, "-n", std::to_string(m.ranks), "--oversubscribe", "--bind-to", "none"};
    for (const std::string& s :
         {exe, std::string("train"), std::string("--config"), config_path(m),
          std::string("--steps"), std::to_string(o.steps), std::string("--threads"),
          std::to_string(m.threads), std::string("--metrics"), base + ".metrics.jsonl",
          std::string("--memory-json"), base + ".memory.json"})
      a.push_back(s);
    if (m.profile) {
      a.emplace_back("--profile");
      a.push_back(base + ".profile.json");
    }
    return a;
  }

  void write_config(const Mode& m) const {
    std::ofstream f(config_path(m));
    f << config_json(m) << "\n";
    TZ_CHECK(f.good(), "cannot write " + config_path(m), "check the disk");
  }

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

void validate(const BenchTrainModesOptions& o) {
  TZ_CHECK(o.steps > o.warmup && o.warmup >= 0,
           "--steps must be larger than --warmup (" + std::to_string(o.steps) +
               " <= " + std::to_string(o.warmup) + ")",
           "for example: --steps 8 --warmup 2");
  TZ_CHECK(o.channels % o.heads == 0, "--channels must be divisible by --heads",
           "for example: --channels 512 --heads 8");
}

std::string base_dir(const BenchTrainModesOptions& o) {
  if (!o.dir.empty()) return o.dir;
  for (const char* candidate : {"/var/tmp", "."})
    if (usable_disk_dir(candidate)) return candidate;
  TZ_THROW("no writable directory on a real disk (/var/tmp and . are tmpfs or read-only)",
           "pass --dir with a directory on the drive to use for NVMe swap");
}

int64_t repeats_or(const BenchTrainModesOptions& o, int64_t fallback) {
  return o.repeats > 0 ? o.repeats : fallback;
}

void print_json(const char* name, double value, const char* baseline, double baseline_value,
                const BenchTrainModesOptions& o, int ranks, int64_t threads, int64_t repeats,
                const std::string& extra) {
  std::printf(
      "{\"bench\": \"%s\", \"value\": %.3f, \"unit\": \"ms/step\", \"baseline\": \"%s\", "
      "\"baseline_value\": %.3f, \"ratio\": %.4f, \"ranks\": %d, \"threads\": %lld, "
      "\"layers\": %lld, \"channels\": %lld, \"seq\": %lld, \"batch\": %lld, \"steps\": %lld, "
      "\"warmup\": %lld, \"repeats\": %lld%s}\n",
      name, value, baseline, baseline_value, baseline_value / value, ranks,
      static_cast<long long>(threads), static_cast<long long>(o.layers),
      static_cast<long long>(o.channels), static_cast<long long>(o.seq),
      static_cast<long long>(o.batch), static_cast<long long>(o.steps),
      static_cast<long long>(o.warmup), static_cast<long long>(repeats), extra.c_str());
  std::fflush(stdout);
}

std::string run_medians_json(const char* key, const std::vector<double>& v) {
  std::string s = std::string(", \"") + key + "\": [";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int bench_train_nvme(const BenchTrainModesOptions& o) {
  validate(o);
  const int64_t repeats = repeats_or(o, 2);
  TempDir dir(base_dir(o));
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};
  const std::string swap = dir.path() + "/swap";
  std::filesystem::create_directory(swap);
  const std::string nvme =
      "{\"device\": \"nvme\", \"nvme_path\": " + nlohmann::json(swap).dump() + "}";
  std::string optimizer_nvme = nvme;
  if (o.swap_buffers > 0)
    optimizer_nvme = "{\"device\": \"nvme\", \"nvme_path\": " + nlohmann::json(swap).dump() +
                     ", \"buffer_count\": " + std::to_string(o.swap_buffers) + "}";
  Mode n{"stage 3, NVMe offload",
         "nvme",
         2,
         1,
         3,
         ", \"offload_param\": " + nvme + ", \"offload_optimizer\": " + optimizer_nvme,
         false,
         "nvme"};
  Mode h{"stage 3, host offload",
         "host",
         2,
         1,
         3,
         ", \"offload_param\": {\"device\": \"cpu\"}, \"offload_optimizer\": {\"device\": "
         "\"cpu\"}",
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
  char extra[1024];
  std::snprintf(extra, sizeof extra,
                ", \"goal\": 0.77, \"nvme_run_steal_s\": %.2f, \"nvme_run_iowait_s\": %.2f, "
                "\"host_run_steal_s\": %.2f, \"host_run_iowait_s\": %.2f, "
                "\"nvme_prefetch_hits\": %.2f, \"nvme_on_demand_fetches\": "
                "%.2f, \"nvme_stall_ms\": %.3f, \"host_prefetch_hits\": %.2f, "
                "\"host_on_demand_fetches\": %.2f, \"host_stall_ms\": %.3f, \"nvme_state_bytes\": "
                "%.0f, \"host_state_bytes\": %.0f, \"nvme_run_host_io_peak_bytes\": %.0f, "
                "\"host_run_host_io_peak_bytes\": %.0f, \"swap_buffers\": %lld",
                p.a.steal_s, p.a.iowait_s, p.b.steal_s, p.b.iowait_s, p.a.hits, p.a.on_demand,
                p.a.stall_ms, p.b.hits, p.b.on_demand, p.b.stall_ms, ns.nvme, hs.host,
                ns.host_io_peak, hs.host_io_peak, static_cast<long long>(o.swap_buffers));
  print_json("train.nvme_vs_host", p.a.median_ms, "host offload", p.b.median_ms, o, 2, 1, repeats,
             extra + run_medians_json("nvme_run_ms", p.a.run_medians) +
                 run_medians_json("host_run_ms", p.b.run_medians));
  return 0;
}

int bench_train_stage3(const BenchTrainModesOptions& o) {
  validate(o);
  const int64_t repeats = repeats_or(o, 2);
  TempDir dir(base_dir(o));
  // Two ranks, so that stage 3's gathers, reduce-scatters and prefetch are measured (on one rank
  // a device-resident shard is the unit itself and nothing is communicated); stage 0 on two ranks
  // is plain data parallelism.
  Bench bench{o, self_exe(), find_mpiexec(o.mpiexec), dir.path()};
  Mode s3{"stage 3, all on device", "stage3", 2, 1, 3, "", false, ""};
  Mode s0{"stage 0 (reference)", "stage0", 2, 1, 0, "", false, ""};
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
  char extra[256];
  std::snprintf(extra, sizeof extra,
                ", \"goal\": 0.91, \"stage3_prefetch_hits\": %.2f, \"stage3_on_demand_fetches\": "
                "%.2f, \"stage3_stall_ms\": %.3f",
                p.a.hits, p.a.on_demand, p.a.stall_ms);
  print_json("train.stage3_vs_stage0", p.a.median_ms, "stage 0", p.b.median_ms, o, 2, 1, repeats,
             extra + run_medians_json("stage3_run_ms", p.a.run_medians) +
                 run_medians_json("stage0_run_ms", p.b.run_medians));
  return 0;
}

int bench_profile_overhead(const BenchTrainModesOptions& o) {
  validate(o);
  const int64_t repeats = repeats_or(o, 3);
  TempDir dir(base_dir(o));
  Bench bench{o, self_exe(), "", dir.path()};
  const std::string opt = ", \"offload_optimizer\": {\"device\": \"cpu\"}";
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
  char extra[128];
  std::snprintf(extra, sizeof extra, ", \"goal\": 0.98, \"pair_ratio_median\": %.4f",
                median(pair_ratios));
  print_json("profile.overhead", p.a.median_ms, "no profile", p.b.median_ms, o, 1, 2, repeats,
             extra + run_medians_json("on_run_ms", p.a.run_medians) +
                 run_medians_json("off_run_ms", p.b.run_medians));
  return 0;
}

int bench_train_modes(const BenchTrainModesOptions& o) {
  int rc = bench_train_nvme(o);
  rc = std::max(rc, bench_train_stage3(o));
  rc = std::max(rc, bench_profile_overhead(o));
  return rc;
}

namespace {

void add_options(CLI::App& c, BenchTrainModesOptions& o, const char* repeats_help) {
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
  c.add_option("--batch", o.batch, "micro-batch per rank")
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
  c.add_option("--swap-buffers", o.swap_buffers,
               "train-nvme: offload_optimizer.buffer_count of the NVMe run (default: the "
               "config's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
}

}  // namespace

std::function<int()> add_bench_train_modes_commands(CLI::App& bench) {
  auto nvme = std::make_shared<BenchTrainModesOptions>();
  auto stage3 = std::make_shared<BenchTrainModesOptions>();
  auto prof = std::make_shared<BenchTrainModesOptions>();
  auto all = std::make_shared<BenchTrainModesOptions>();
  CLI::App* n = bench.add_subcommand(
      "train-nvme", "`tierzero train` on 2 ranks, stage 3: NVMe offload vs. host offload");
  add_options(*n, *nvme, "runs of each mode, alternating (default 2)");
  CLI::App* s = bench.add_subcommand(
      "train-stage3", "`tierzero train` on 2 ranks: stage 3 vs. stage 0 (data parallel)");
  add_options(*s, *stage3, "runs of each mode, alternating (default 2)");
  CLI::App* p = bench.add_subcommand(
      "profile", "`tierzero train` on 1 rank, stage 3: with --profile vs. without");
  add_options(*p, *prof, "runs of each mode, alternating (default 3)");
  CLI::App* a = bench.add_subcommand("train-modes",
                                     "train-nvme, train-stage3 and profile, one after the other");
  add_options(*a, *all, "runs of each mode (default 2; profile 3)");
  return [=] {
    if (n->parsed()) return bench_train_nvme(*nvme);
    if (s->parsed()) return bench_train_stage3(*stage3);
    if (p->parsed()) return bench_profile_overhead(*prof);
    if (a->parsed()) return bench_train_modes(*all);
    return -1;
  };
}

}  // namespace tierzero::cli
