// The child-run helpers of the `tierzero train` benchmarks (see child_runs.hpp): moved here
// from train_modes.cpp unchanged so that tp.cpp runs its children the same way.
#include "child_runs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/train/config_bridges.hpp"

extern char** environ;

namespace tierzero::bench {

namespace {

constexpr long kTmpfsMagic = 0x01021994;

bool usable_disk_dir(const std::string& dir) {
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return false;
  return static_cast<long>(fs.f_type) != kTmpfsMagic && access(dir.c_str(), W_OK) == 0;
}

}  // namespace

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

void validate_train_run_options(const TrainRunOptions& o) {
  TZ_CHECK(o.steps > o.warmup && o.warmup >= 0,
           "--steps must be larger than --warmup (" + std::to_string(o.steps) +
               " <= " + std::to_string(o.warmup) + ")",
           "for example: --steps 8 --warmup 2");
  TZ_CHECK(o.channels % o.heads == 0, "--channels must be divisible by --heads",
           "for example: --channels 512 --heads 8");
}

nlohmann::ordered_json bench_tierzero_json(const TrainRunOptions& o, int64_t threads) {
  nlohmann::ordered_json t;
  t["steps"] = o.steps;
  t["seq_len"] = o.seq;
  t["seed"] = 7;
  t["threads"] = threads;
  t["val_batches"] = 0;
  t["model"] = {{"vocab_size", kBenchVocab},
                {"n_layer", o.layers},
                {"n_head", o.heads},
                {"n_embd", o.channels},
                {"context_length", o.seq}};
  return t;
}

void set_bench_compute(nlohmann::ordered_json& c, const std::string& compute_dtype) {
  c["tierzero"]["compute_dtype"] = compute_dtype;
  if (compute_dtype != "fp32") c[compute_dtype] = {{"enabled", true}};
}

nn::GPTConfig bench_model_config(const TrainRunOptions& o, int64_t context) {
  train::ModelShape shape;
  shape.vocab_size = kBenchVocab;
  shape.context_length = context;
  shape.n_layer = o.layers;
  shape.n_head = o.heads;
  shape.n_embd = o.channels;
  return train::gpt_config_from(shape);  // the trainer's rule: vocabulary padded to 128
}

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

TempDir::TempDir(const std::string& base) {
  std::string templ = base + "/tierzero-bench-train-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    TZ_THROW("cannot create a benchmark directory in " + base + ": " + errno_string(),
             "pass --dir with a writable directory on a real disk");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string bench_base_dir(const std::string& given) {
  if (!given.empty()) return given;
  for (const char* candidate : {"/var/tmp", "."})
    if (usable_disk_dir(candidate)) return candidate;
  TZ_THROW("no writable directory on a real disk (/var/tmp and . are tmpfs or read-only)",
           "pass --dir with a directory on the drive to use for NVMe swap");
}

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

std::vector<std::string> child_environment(int64_t threads) {
  // The launcher's job variables (OMPI_COMM_WORLD_*, PMIX_RANK, ...) stay behind: a child is its
  // own job, not a rank of this one. MCA settings (OMPI_MCA_*, PMIX_MCA_*, PRTE_MCA_*) go along
  // when this process was not launched by mpiexec (which puts its job's own among them): a
  // machine may need them for MPI to start at all (a container's plm=isolated).
  const bool keep_mca = !comm::launched_by_mpi();
  std::vector<std::string> env;
  bool btl_set = false;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto starts = [&](const char* p) { return kv.rfind(p, 0) == 0; };
    const bool mca =
        keep_mca && (starts("OMPI_MCA_") || starts("PMIX_MCA_") || starts("PRTE_MCA_"));
    if ((!mca && (starts("OMPI_") || starts("PMIX_") || starts("PRTE_"))) ||
        starts("OMP_NUM_THREADS=") || starts("OPENBLAS_NUM_THREADS="))
      continue;
    btl_set = btl_set || starts("OMPI_MCA_btl=");
    env.push_back(kv);
  }
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  if (!btl_set) env.emplace_back("OMPI_MCA_btl=self,vader");
  env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  env.emplace_back("OPENBLAS_NUM_THREADS=1");
  return env;
}

ChildOutcome spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
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
  ChildOutcome out;
  out.seconds = wall.seconds();
  out.ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!out.ok)
    out.why = timed_out           ? "ran past " + std::to_string(timeout_s) + " s and was killed"
              : WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                  : "was killed by signal " + std::to_string(WTERMSIG(status));
  return out;
}

double run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 const std::string& log, int64_t timeout_s) {
  const ChildOutcome r = spawn_child(argv, env, log, timeout_s);
  if (!r.ok) {
    std::fprintf(stderr, "  run failed: %s\n  %s; last lines of its output:\n%s",
                 join(argv).c_str(), r.why.c_str(), file_tail(log, 20).c_str());
    std::fflush(stderr);
    TZ_THROW("a benchmark run " + r.why + ": " + join(argv),
             "its output is shown above; run the command by hand to reproduce");
  }
  return r.seconds;
}

std::vector<std::string> train_argv(const std::string& exe, const std::string& mpiexec, int ranks,
                                    const std::string& config, int64_t steps, int64_t threads,
                                    const std::string& base) {
  std::vector<std::string> a;
  if (ranks > 1) a = {mpiexec, "-n", std::to_string(ranks), "--oversubscribe", "--bind-to", "none"};
  for (const std::string& s :
       {exe, std::string("train"), std::string("--config"), config, std::string("--steps"),
        std::to_string(steps), std::string("--threads"), std::to_string(threads),
        std::string("--metrics"), base + ".metrics.jsonl", std::string("--memory-json"),
        base + ".memory.json"})
    a.push_back(s);
  return a;
}

void write_text_file(const std::string& path, const std::string& text) {
  write_file_atomic(path, text + "\n");
}

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
      m.tp_all_reduce_bytes = j.value("tp_all_reduce_bytes", size_t{0});
      m.tp_all_gather_bytes = j.value("tp_all_gather_bytes", size_t{0});
      m.tp_reduce_scatter_bytes = j.value("tp_reduce_scatter_bytes", size_t{0});
      m.pp_bubble = j.value("pp_bubble", -1.0);
      m.pp_step_ms = j.value("pp_step_ms", 0.0);
      m.pp_compute_ms = j.value("pp_compute_ms", 0.0);
      m.ulysses_all_to_all_bytes = j.value("ulysses_all_to_all_bytes", size_t{0});
      m.ulysses_calls = j.value("ulysses_calls", size_t{0});
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

std::vector<double> counted_ms(const std::vector<StepMetrics>& steps, int64_t warmup) {
  std::vector<double> ms;
  for (size_t i = static_cast<size_t>(warmup); i < steps.size(); ++i) ms.push_back(steps[i].ms);
  return ms;
}

nlohmann::json read_memory_report(const std::string& path) {
  std::ifstream in(path);
  TZ_CHECK(in.good(), "the run wrote no memory report " + path, "run the command by hand");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("bad memory report " + path + ": " + e.what(), "run the command by hand");
  }
}

std::vector<nlohmann::json> read_result_lines(const std::string& log) {
  std::ifstream in(log);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line, nullptr, false));
  return out;
}

double result_baseline(const std::vector<nlohmann::json>& lines, const std::string& bench,
                       const std::string& log, const std::string& field) {
  for (const nlohmann::json& j : lines)
    if (j.is_object() && j.value("bench", "") == bench && j.contains(field) &&
        j.at(field).is_number())
      return j.at(field).get<double>();
  TZ_THROW(
      "the ceiling run printed no '" + bench + "' result with '" + field + "' (log " + log + ")",
      "run the command in the log by hand");
}

}  // namespace tierzero::bench
