// `tierzero bench offload` (see offload.hpp). Children: `tierzero bench train`, `bench adam` and
// (mode nvme) `bench io` for the ceilings, then one `tierzero train --profile` run whose profile
// gives each link's bytes and busy time per step; the copy rates are measured here, through the
// backend's own copy on a stream, between a pinned pool buffer and device memory.
#include "tierzero/bench/offload.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_runs.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/profile/profile_summary.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::bench {

namespace {

struct CopyRates {
  double h2d = 0.0, d2h = 0.0;  // bytes/s, pinned host memory <-> device memory
};

// Median of 5 copies of 256 MiB each way (after one of each), on a stream of the backend.
CopyRates measure_copy_rates(const std::string& device_spec, int64_t threads) {
  constexpr size_t kBytes = size_t{256} << 20;
  std::unique_ptr<Device> dev = make_device(device_spec, static_cast<int>(threads));
  offload::HostPool pool(kBytes + (size_t{4} << 20), dev.get());
  offload::PinnedBuffer host = pool.allocate(kBytes, Category::workspace, "bench offload copy");
  DeviceAllocator alloc(*dev, 0);
  DeviceBuffer device = alloc.allocate(kBytes, Category::workspace, "bench offload copy");
  std::memset(host.data(), 1, kBytes);
  std::unique_ptr<Stream> stream = dev->create_stream();
  dev->fill_zero(device.data(), kBytes, *stream);
  stream->synchronize();
  const auto rate = [&](CopyKind kind) {
    std::vector<double> s;
    for (int k = 0; k < 6; ++k) {
      Timer t;
      if (kind == CopyKind::host_to_device)
        dev->copy(device.data(), host.data(), kBytes, kind, *stream);
      else
        dev->copy(host.data(), device.data(), kBytes, kind, *stream);
      stream->synchronize();
      if (k > 0) s.push_back(t.seconds());
    }
    return static_cast<double>(kBytes) / median(s);
  };
  CopyRates r;
  r.h2d = rate(CopyKind::host_to_device);
  r.d2h = rate(CopyKind::device_to_host);
  return r;
}

struct Ceilings {
  double gemm = 0.0;  // FLOP/s
  double adam = 0.0;  // parameters/s
  CopyRates copy;
  double nvme_read = 0.0, nvme_write = 0.0;  // bytes/s (fio); 0 in mode host
};

Ceilings measure_ceilings(const BenchOffloadOptions& o, const std::string& exe,
                          const std::vector<std::string>& env, const std::string& dir) {
  Ceilings c;
  const std::string t = std::to_string(o.threads);
  const std::string gemm_log = dir + "/gemm.log";
  run_child({exe, "bench", "train", "--model", "gpt2", "--steps", "1", "--batch", "1", "--seq",
             "64", "--threads", t, "--device", o.device},
            env, gemm_log, o.timeout_s);
  c.gemm = result_baseline(read_result_lines(gemm_log), "train.step", gemm_log) * 1e9;
  const std::string adam_log = dir + "/adam.log";
  run_child({exe, "bench", "adam", "--params", "33554432", "--threads", t, "--repeats", "3",
             "--peer", "none"},
            env, adam_log, o.timeout_s);
  c.adam =
      result_baseline(read_result_lines(adam_log), "adam.cpu", adam_log, "gparams_per_s") * 1e9;
  if (o.mode == "nvme") {
    const std::string io_log = dir + "/io.log";
    run_child({exe, "bench", "io", "--size", "1GiB", "--dir", dir, "--repeats", "1"}, env, io_log,
              o.timeout_s);
    const std::vector<nlohmann::json> io = read_result_lines(io_log);
    c.nvme_read = result_baseline(io, "io.read", io_log) * 1e9;
    c.nvme_write = result_baseline(io, "io.write", io_log) * 1e9;
  }
  c.copy = measure_copy_rates(o.device, o.threads);
  return c;
}

// ZeRO-3 with parameters, optimizer states and gradient shards on the mode's tier, activation
// checkpointing, the gathers and buckets of bench oversize.
std::string write_config(const BenchOffloadOptions& o, const std::string& dir) {
  const std::string tier = o.mode == "nvme" ? "nvme" : "cpu";
  nlohmann::ordered_json param = {{"device", tier}}, optimizer = {{"device", tier}};
  if (o.mode == "nvme") {
    param.update({{"nvme_path", dir}, {"buffer_count", 4}});
    optimizer.update({{"nvme_path", dir}, {"buffer_count", 4}, {"buffer_size", 16777216}});
  }
  nlohmann::ordered_json config;
  config["train_micro_batch_size_per_gpu"] = o.batch;
  config["zero_optimization"] = {{"stage", 3},
                                 {"stage3_param_persistence_threshold", 0},
                                 {"stage3_max_live_parameters", 100000000},
                                 {"stage3_prefetch_bucket_size", 50000000},
                                 {"reduce_bucket_size", 50000000},
                                 {"offload_param", param},
                                 {"offload_optimizer", optimizer}};
  config["tierzero"] = {{"seq_len", o.seq},
                        {"val_batches", 0},
                        {"seed", 7},
                        {"activation_checkpointing", true},
                        {"optimizer_overlap", o.overlap},
                        {"device", o.device},
                        {"model", {{"context_length", o.seq}}}};
  if (o.mode == "nvme") config["tierzero"]["offload_gradients"] = "nvme";
  const std::string path = dir + "/offload.json";
  write_text_file(path, config.dump());
  return path;
}

// One engine of the step: its work at its ceiling (ideal) and the busy time the profile saw.
struct Engine {
  std::string name;
  std::string work;  // what it has to do per step, in words
  double ideal_s = 0.0;
  double busy_s = 0.0;
};

}  // namespace

BenchReport bench_offload(const BenchOffloadOptions& o) {
  TZ_CHECK(o.mode == "host" || o.mode == "nvme", "bench offload: --mode " + o.mode,
           "use --mode host (ZeRO-Offload) or --mode nvme (ZeRO-Infinity)");
  TZ_CHECK(o.steps >= 2, "bench offload: --steps must be at least 2",
           "the first step records the fetch trace and is not measured");
  const std::string exe = self_exe();
  const std::vector<std::string> env = child_environment(o.threads);
  TempDir dir(bench_base_dir(o.dir));
  train::ModelShape shape = train::TrainConfig::defaults().model;
  train::apply_model_name(o.model, shape);
  const nn::GPTConfig model = train::gpt_config_from(shape);
  const double n = static_cast<double>(nn::gpt_param_layout(model).parameter_count());

  const Ceilings c = measure_ceilings(o, exe, env, dir.path());
  const std::string base = dir.path() + "/run";
  std::vector<std::string> argv =
      train_argv(exe, "", 1, write_config(o, dir.path()), o.steps, o.threads, base);
  for (const std::string& a :
       {std::string("--model"), o.model, std::string("--host-mem"), std::to_string(o.host_mem),
        std::string("--device-mem"), std::to_string(o.device_mem), std::string("--profile"),
        base + ".profile.json"})
    argv.push_back(a);
  const double wall = run_child(argv, env, base + ".log", o.timeout_s);
  const profile::ProfileSummary s =
      profile::summarize(profile::read_profile(base + ".profile.json"));
  const auto track = [&](Track t) { return s.track_per_step[static_cast<size_t>(t)]; };

  // The step's work: bytes per link from the profile; FLOPs of the forward, the recomputed
  // forward and the backward (8 per parameter and token) plus attention's (16 L T C per token),
  // as bench oversize counts them; every parameter updated once.
  const double tokens = static_cast<double>(o.batch * o.seq);
  const double attn = 16.0 * static_cast<double>(model.num_layers) * static_cast<double>(o.seq) *
                      static_cast<double>(model.channels);
  const double flops = tokens * (8.0 * n + attn);
  const double h2d = static_cast<double>(track(Track::host_to_device).bytes);
  const double d2h = static_cast<double>(track(Track::device_to_host).bytes);
  const double nvme_r = static_cast<double>(track(Track::nvme_read).bytes);
  const double nvme_w = static_cast<double>(track(Track::nvme_write).bytes);
  char words[160];
  std::vector<Engine> engines;
  const bool cpu = o.device == "cpu";
  const Engine gemm{"compute", "", flops / c.gemm, s.compute_s};
  std::snprintf(words, sizeof words, "%.2f GB down", h2d / 1e9);
  const Engine down{"host->device", words, h2d / c.copy.h2d, track(Track::host_to_device).busy_s};
  std::snprintf(words, sizeof words, "%.2f GB up", d2h / 1e9);
  const Engine up{"device->host", words, d2h / c.copy.d2h, track(Track::device_to_host).busy_s};
  const Engine adam{"cpu adamw", "", n / c.adam, track(Track::optimizer).busy_s};
  if (cpu) {  // one engine: the same cores and memory do all four
    std::snprintf(words, sizeof words, "%.1f GFLOP + %.0fM params + %.2f/%.2f GB copied",
                  flops / 1e9, n / 1e6, h2d / 1e9, d2h / 1e9);
    engines.push_back({"cpu (compute+adamw+copies)", words,
                       gemm.ideal_s + adam.ideal_s + down.ideal_s + up.ideal_s,
                       gemm.busy_s + adam.busy_s + down.busy_s + up.busy_s});
  } else {
    engines.push_back(gemm);
    engines.back().work = std::to_string(static_cast<int64_t>(flops / 1e9)) + " GFLOP";
    engines.push_back(down);
    engines.push_back(up);
    engines.push_back(adam);
    engines.back().work = std::to_string(static_cast<int64_t>(n / 1e6)) + "M params";
  }
  if (o.mode == "nvme") {
    std::snprintf(words, sizeof words, "%.2f GB read + %.2f GB written", nvme_r / 1e9,
                  nvme_w / 1e9);
    engines.push_back({"nvme", words, nvme_r / c.nvme_read + nvme_w / c.nvme_write,
                       track(Track::nvme_read).busy_s + track(Track::nvme_write).busy_s});
  }
  const Engine* bottleneck = &engines[0];
  double sum_s = 0.0;
  for (const Engine& e : engines) {
    sum_s += e.ideal_s;
    if (e.ideal_s > bottleneck->ideal_s) bottleneck = &e;
  }
  const double floor_s = bottleneck->ideal_s;
  const double step_s = s.mean_step_s;

  std::fprintf(stderr,
               "bench offload: %s, %.0fM parameters, states on %s, %s, batch %lld x seq %lld, "
               "%zu steady steps of %zu\n",
               o.model.c_str(), n / 1e6, o.mode.c_str(), o.device.c_str(),
               static_cast<long long>(o.batch), static_cast<long long>(o.seq), s.steady_steps,
               s.steps);
  std::fprintf(stderr, "  %-28s %-48s %10s %10s\n", "engine", "work per step", "ideal s", "busy s");
  for (const Engine& e : engines)
    std::fprintf(stderr, "  %-28s %-48s %10.3f %10.3f%s\n", e.name.c_str(), e.work.c_str(),
                 e.ideal_s, e.busy_s, &e == bottleneck ? "  <- bottleneck" : "");
  std::fprintf(stderr, "  %-40s %10.3f s\n", "step (mean of the steady steps)", step_s);
  std::fprintf(stderr, "  %-40s %10.3f s  step / floor %.2f (goal <= 1.15)\n",
               "floor (largest engine)", floor_s, step_s / floor_s);
  std::fprintf(stderr, "  %-40s %10.3f s  step / sum %.2f\n", "sum of the engines", sum_s,
               step_s / sum_s);
  std::fprintf(stderr,
               "  ceilings: gemm %.1f GFLOP/s, adamw %.3f Gparam/s, copy %.2f GB/s down %.2f up",
               c.gemm / 1e9, c.adam / 1e9, c.copy.h2d / 1e9, c.copy.d2h / 1e9);
  if (o.mode == "nvme")
    std::fprintf(stderr, ", fio %.2f GB/s read %.2f write", c.nvme_read / 1e9, c.nvme_write / 1e9);
  std::fprintf(stderr, "\n  run wall %.1f s; its log, profile and ceilings' logs were in %s\n",
               wall, dir.path().c_str());

  nlohmann::ordered_json j = bench_result("offload." + o.mode, round_to(step_s, 4), "s", "floor",
                                          round_to(floor_s, 4), floor_s / step_s);
  j["step_over_floor"] = round_to(step_s / floor_s, 4);
  j["sum_s"] = round_to(sum_s, 4);
  j["step_over_sum"] = round_to(step_s / sum_s, 4);
  j["bottleneck"] = bottleneck->name;
  nlohmann::ordered_json e = nlohmann::ordered_json::object();
  for (const Engine& x : engines)
    e[x.name] = {{"ideal_s", round_to(x.ideal_s, 4)}, {"busy_s", round_to(x.busy_s, 4)}};
  j["engines"] = e;
  j["model"] = o.model;
  j["parameters"] = static_cast<int64_t>(n);
  j["device"] = o.device;
  j["batch"] = o.batch;
  j["seq"] = o.seq;
  // What the peers report (scripts/device/peer_offload_torch.py), for the same micro-batch.
  j["tokens_per_s"] =
      round_to(static_cast<double>(o.batch) * static_cast<double>(o.seq) / step_s, 2);
  j["overlap"] = o.overlap;
  j["gemm_gflops"] = round_to(c.gemm / 1e9, 1);
  j["adam_gparams_per_s"] = round_to(c.adam / 1e9, 4);
  j["h2d_gbs"] = round_to(c.copy.h2d / 1e9, 3);
  j["d2h_gbs"] = round_to(c.copy.d2h / 1e9, 3);
  if (o.mode == "nvme") {
    j["fio_read_gbs"] = round_to(c.nvme_read / 1e9, 3);
    j["fio_write_gbs"] = round_to(c.nvme_write / 1e9, 3);
  }
  j["h2d_bytes"] = static_cast<int64_t>(h2d);
  j["d2h_bytes"] = static_cast<int64_t>(d2h);
  j["nvme_read_bytes"] = static_cast<int64_t>(nvme_r);
  j["nvme_write_bytes"] = static_cast<int64_t>(nvme_w);
  BenchReport report;
  report.emit(j);
  return report;
}

}  // namespace tierzero::bench
