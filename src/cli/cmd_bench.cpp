// `tierzero bench train`: one training step of GPT-2 124M (fp32, one rank) against the machine's
// own sgemm rate measured in the same run. Table on stderr, one JSON object per result on stdout.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_activations.hpp"
#include "bench_adam.hpp"
#include "bench_comm.hpp"
#include "bench_crc.hpp"
#include "bench_io.hpp"
#include "bench_json.hpp"
#include "bench_oversize.hpp"
#include "bench_pp.hpp"
#include "bench_tp.hpp"
#include "bench_train_modes.hpp"
#include "bench_ulysses.hpp"
#include "commands.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"

namespace tierzero::cli {

namespace {

struct BenchFlags {
  std::string device = "cpu";
  int64_t threads = 2;
  int64_t batch = 4;
  int64_t seq = 64;
  int64_t steps = 3;
  std::string model = "gpt2";
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of a 2048^3 sgemm, the better of two ways: OpenBLAS with its own threads, and the
// backend's matmul (which on the CPU splits the product over OpenMP threads, one OpenBLAS call
// each). Taking the better one keeps the baseline honest whichever is faster on this machine.
struct SgemmRate {
  double openblas_threads;  // GFLOP/s, cblas_sgemm with OpenBLAS's thread pool
  double backend_matmul;    // GFLOP/s, Kernels::matmul_forward
  double best() const { return std::max(openblas_threads, backend_matmul); }
};

SgemmRate sgemm_rate(Device& dev, DeviceAllocator& alloc, int threads) {
  constexpr size_t n = 2048;
  constexpr double flops = 2.0 * n * n * n;
  DeviceBuffer a = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench a");  // (n, n)
  DeviceBuffer b = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench b");  // (n, n)
  DeviceBuffer c = alloc.allocate(n * n * sizeof(float), Category::workspace, "bench c");  // (n, n)
  std::vector<float> host(n * n);                                                          // (n, n)
  Rng rng(1);
  for (auto& x : host) x = static_cast<float>(rng.normal());
  Stream& s = dev.default_stream();
  dev.copy(a.data(), host.data(), n * n * sizeof(float), CopyKind::host_to_device, s);
  dev.copy(b.data(), host.data(), n * n * sizeof(float), CopyKind::host_to_device, s);
  auto time_it = [&](auto&& fn) {
    std::vector<double> times;
    for (int i = 0; i < 6; ++i) {
      s.synchronize();
      Timer t;
      fn();
      s.synchronize();
      if (i > 0) times.push_back(t.seconds());  // the first call warms up
    }
    return flops / median(times) / 1e9;
  };
  SgemmRate r{0.0, 0.0};
  if (dev.kind() == DeviceKind::cpu) {
    const int saved = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    r.openblas_threads = time_it([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.f32(), n, b.f32(), n,
                  0.0f, c.f32(), n);
    });
    openblas_set_num_threads(saved);
  }
  r.backend_matmul =
      time_it([&] { dev.kernels().matmul_forward(c.f32(), a.f32(), b.f32(), nullptr, n, n, n); });
  return r;
}

int bench_train(const BenchFlags& f) {
  std::unique_ptr<Device> dev = make_device(f.device, static_cast<int>(f.threads));
  DeviceAllocator alloc(*dev, 0);
  const SgemmRate sg = sgemm_rate(*dev, alloc, static_cast<int>(f.threads));
  const double sgemm = sg.best();
  alloc.release_cached();

  nn::GPTConfig cfg = nn::GPTConfig::preset(f.model);
  const auto B = static_cast<size_t>(f.batch), T = static_cast<size_t>(f.seq);
  nn::GPT model(cfg, alloc);
  nn::LocalParams params(model.layout(), alloc);
  std::vector<float> host(model.layout().total_numel());  // (total_numel)
  nn::init_gpt2_params(model.layout(), cfg, 1337, host.data());
  dev->copy(params.params(), host.data(), host.size() * sizeof(float), CopyKind::host_to_device,
            dev->default_stream());
  train::OptimizerConfig oc;
  train::AdamWOptimizer opt(oc, model.layout(), alloc);
  std::vector<int32_t> x(B * T), y(B * T);  // (B, T)
  Rng rng(7);
  for (size_t i = 0; i < B * T; ++i) {
    x[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    y[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
  }
  std::vector<double> times;
  for (int64_t i = 0; i <= f.steps; ++i) {  // the first step warms caches and is not counted
    Timer t;
    params.zero_grads();
    model.forward_backward(params, x.data(), y.data(), B, T, 1.0f);
    opt.step(params, 1e-4, 1.0);
    dev->default_stream().synchronize();
    if (i > 0) times.push_back(t.seconds());
  }
  const double step_s = median(times);
  const double tokens = static_cast<double>(B * T);
  const double N = static_cast<double>(model.layout().parameter_count());
  const double flops = 6.0 * N * tokens + 6.0 * static_cast<double>(cfg.num_layers * cfg.channels) *
                                              static_cast<double>(T) * tokens;
  const double rate = flops / step_s / 1e9;
  std::fprintf(stderr, "bench train: %s (%.1fM params), batch %zu x %zu, fp32, %s\n",
               f.model.c_str(), N / 1e6, B, T, dev->name().c_str());
  std::fprintf(stderr, "  %-32s %12s\n", "measure", "value");
  if (sg.openblas_threads > 0)
    std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "sgemm 2048^3, OpenBLAS threads",
                 sg.openblas_threads);
  std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "sgemm 2048^3, backend matmul", sg.backend_matmul);
  std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "baseline (the better)", sgemm);
  std::fprintf(stderr, "  %-32s %9.1f ms\n", "train step (median)", step_s * 1e3);
  std::fprintf(stderr, "  %-32s %9.1f GF/s\n", "train step rate", rate);
  std::fprintf(stderr, "  %-32s %9.1f tok/s\n", "throughput", tokens / step_s);
  std::fprintf(stderr, "  %-32s %9.3f\n", "ratio (goal >= 0.60)", rate / sgemm);
  nlohmann::ordered_json j = bench_result("train.step", round_to(rate, 3), "GFLOP/s", "sgemm",
                                          round_to(sgemm, 3), rate / sgemm);
  j["step_ms"] = round_to(step_s * 1e3, 2);
  j["model"] = f.model;
  j["batch"] = B;
  j["seq"] = T;
  j["device"] = dev->name();
  print_result(j);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "measure against the machine's own ceilings");
  bench->require_subcommand(1);

  auto train = std::make_shared<BenchFlags>();
  CLI::App* t = bench->add_subcommand("train", "a GPT-2 training step vs. this machine's sgemm");
  t->add_option("--device", train->device, "cpu, cuda or cuda:N")->capture_default_str();
  t->add_option("--threads", train->threads, "CPU threads")->capture_default_str();
  t->add_option("--batch", train->batch, "micro-batch size")->capture_default_str();
  t->add_option("--seq", train->seq, "sequence length")->capture_default_str();
  t->add_option("--steps", train->steps, "timed steps")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  t->add_option("--model", train->model, "gpt2, gpt2-medium, gpt2-large, gpt2-xl")
      ->capture_default_str();

  auto io = std::make_shared<BenchIoOptions>();
  CLI::App* o =
      bench->add_subcommand("io", "NVMe swap write/read/stream vs. fio on the same drive");
  o->add_option("--dir", io->dir, "directory on the drive to measure (default: under /var/tmp)");
  o->add_option("--size", io->size, "bytes of swap, e.g. 2G")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  o->add_option("--block", io->block, "request size, e.g. 1M")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  o->add_option("--queue-depth", io->queue_depth, "requests in flight")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  o->add_option("--repeats", io->repeats, "each figure is the median of this many runs")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();

  auto comm = std::make_shared<BenchCommOptions>();
  CLI::App* c =
      bench->add_subcommand("comm", "collectives (MPI backend) vs. raw MPI, 1 KiB-256 MiB");
  add_bench_comm_options(*c, *comm);

  auto adam = std::make_shared<BenchAdamOptions>();
  CLI::App* a = bench->add_subcommand("adam", "CPU AdamW + bf16 copy vs. a STREAM triad");
  add_bench_adam_options(*a, *adam);

  std::function<int()> train_modes = add_bench_train_modes_commands(*bench);
  std::function<int()> tp = add_bench_tp_command(*bench);
  std::function<int()> pp = add_bench_pp_command(*bench);
  std::function<int()> ulysses = add_bench_ulysses_command(*bench);
  std::function<int()> crc = add_bench_crc_command(*bench);
  std::function<int()> oversize = add_bench_oversize_command(*bench);
  std::function<int()> activations = add_bench_activations_command(*bench);

  return {bench, [train, io, comm, adam, t, o, c, a, train_modes, tp, pp, ulysses, crc, oversize,
                  activations] {
            if (const int rc = activations(); rc >= 0) return rc;
            if (const int rc = train_modes(); rc >= 0) return rc;
            if (const int rc = crc(); rc >= 0) return rc;
            if (const int rc = tp(); rc >= 0) return rc;
            if (const int rc = pp(); rc >= 0) return rc;
            if (const int rc = ulysses(); rc >= 0) return rc;
            if (const int rc = oversize(); rc >= 0) return rc;
            if (t->parsed()) return bench_train(*train);
            if (o->parsed()) return run_bench_io(*io);
            if (c->parsed()) return bench_comm(*comm);
            if (a->parsed()) return bench_adam(*adam);
            return 2;
          }};
}

}  // namespace tierzero::cli
