// `tierzero bench oversize` (see oversize.hpp). Children: `tierzero bench io` and
// `tierzero bench train` for the machine's ceilings, then two `tierzero train` runs of the same
// oversize config, steps-1 and steps long, whose difference in block I/O is one step's bytes.
#include "tierzero/bench/oversize.hpp"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "child_runs.hpp"
#include "tierzero/bench/results.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::bench {

namespace {

// The whole-model shape the run trains (train --model's rule on the default config), for its
// FLOPs and bytes.
nn::GPTConfig model_shape(const std::string& model) {
  train::ModelShape shape = train::TrainConfig::defaults().model;
  train::apply_model_name(model, shape);
  return train::gpt_config_from(shape);
}

struct ChildIo {
  double read_bytes = 0.0, write_bytes = 0.0;  // block I/O of finished children, so far
};
ChildIo children_io() {
  struct rusage u {};
  TZ_CHECK_ERRNO(::getrusage(RUSAGE_CHILDREN, &u), "getrusage(RUSAGE_CHILDREN)");
  return {static_cast<double>(u.ru_inblock) * 512.0, static_cast<double>(u.ru_oublock) * 512.0};
}

}  // namespace

BenchReport bench_oversize(const BenchOversizeOptions& o) {
  TZ_CHECK(o.steps >= 2, "bench oversize: --steps must be at least 2",
           "one step's bytes are the difference of a steps and a steps-1 run");
  const std::string exe = self_exe();
  const std::vector<std::string> env = child_environment(o.threads);
  TempDir dir(bench_base_dir(o.dir));
  const nn::GPTConfig shape = model_shape(o.model);
  const nn::ParamLayout layout = nn::gpt_param_layout(shape);
  const double n = static_cast<double>(layout.parameter_count());
  const double state_bytes = 16.0 * n;  // fp32 params (the master), grads, Adam m and v
  struct statvfs vfs {};
  TZ_CHECK_ERRNO(::statvfs(dir.path().c_str(), &vfs), "statvfs " + dir.path());
  const double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  TZ_CHECK(free_bytes > state_bytes * 1.05 + 3.0 * 1073741824.0,
           "bench oversize needs " + format_bytes(static_cast<size_t>(state_bytes)) +
               " of NVMe swap plus 3 GiB for fio in " + dir.path() + ", but only " +
               format_bytes(static_cast<size_t>(free_bytes)) + " are free",
           "pass --dir on a drive with room, or a smaller --model");

  // The machine's ceilings, measured now.
  const std::string io_log = dir.path() + "/io.log";
  run_child({exe, "bench", "io", "--size", "1GiB", "--dir", dir.path(), "--repeats", "1"}, env,
            io_log, o.timeout_s);
  const std::vector<nlohmann::json> io = read_result_lines(io_log);
  const double fio_write = result_baseline(io, "io.write", io_log) * 1e9;  // bytes/s
  const double fio_read = result_baseline(io, "io.read", io_log) * 1e9;
  const std::string gemm_log = dir.path() + "/gemm.log";
  run_child({exe, "bench", "train", "--model", "gpt2", "--steps", "1", "--batch", "1", "--seq",
             "64", "--threads", std::to_string(o.threads), "--device", o.device},
            env, gemm_log, o.timeout_s);
  const double sgemm =
      result_baseline(read_result_lines(gemm_log), "train.step", gemm_log) * 1e9;  // FLOP/s

  // The run's config: ZeRO-3, every state on NVMe, activation checkpointing.
  // Gathers, prefetch and buckets sized for a device budget of a few GiB (a GPT-2 XL block is
  // 31M parameters, its embeddings 82M), the optimizer's NVMe chunks 64 MiB.
  nlohmann::ordered_json config;
  config["train_micro_batch_size_per_gpu"] = o.batch;
  config["zero_optimization"] = {
      {"stage", 3},
      {"stage3_param_persistence_threshold", 0},
      {"stage3_max_live_parameters", 100000000},
      {"stage3_prefetch_bucket_size", 50000000},
      {"reduce_bucket_size", 50000000},
      {"offload_param", {{"device", "nvme"}, {"nvme_path", dir.path()}, {"buffer_count", 4}}},
      {"offload_optimizer",
       {{"device", "nvme"},
        {"nvme_path", dir.path()},
        {"buffer_count", 4},
        {"buffer_size", 16777216}}}};
  config["tierzero"] = {{"seq_len", o.seq},
                        {"val_batches", 0},
                        {"seed", 7},
                        {"activation_checkpointing", true},
                        {"offload_gradients", o.grads},
                        {"device", o.device},
                        {"model", {{"context_length", o.seq}}}};  // a preset sets its own
  const std::string config_path = dir.path() + "/oversize.json";
  write_text_file(config_path, config.dump());
  auto run = [&](int64_t steps, const std::string& base) {
    std::vector<std::string> argv = train_argv(exe, "", 1, config_path, steps, o.threads, base);
    for (const std::string& a :
         {std::string("--model"), o.model, std::string("--host-mem"), std::to_string(o.host_mem),
          std::string("--device-mem"), std::to_string(o.device_mem)})
      argv.push_back(a);
    const ChildIo before = children_io();
    const double wall = run_child(argv, env, base + ".log", o.timeout_s);
    const ChildIo after = children_io();
    return std::pair<double, ChildIo>{
        wall, {after.read_bytes - before.read_bytes, after.write_bytes - before.write_bytes}};
  };
  std::fprintf(stderr, "bench oversize: %s (%.2f B parameters, %s of state on NVMe in %s)\n",
               o.model.c_str(), n / 1e9, format_bytes(static_cast<size_t>(state_bytes)).c_str(),
               dir.path().c_str());
  const auto [short_wall, short_io] = run(o.steps - 1, dir.path() + "/short");
  const auto [long_wall, long_io] = run(o.steps, dir.path() + "/long");
  const std::vector<StepMetrics> steps = read_metrics(dir.path() + "/long.metrics.jsonl", o.steps);
  const double step_s = steps.back().ms / 1e3;  // the last step: every cache and file warm
  const nlohmann::json memory = read_memory_report(dir.path() + "/long.memory.json");
  const double rss = memory.at("process").at("peak_rss_bytes").get<double>();
  const double moved_read = long_io.read_bytes - short_io.read_bytes;
  const double moved_write = long_io.write_bytes - short_io.write_bytes;

  // What a step must move with every state on NVMe: parameters read for the forward and again
  // for the backward; the gradient written, read for its norm and by the update; master, m and v
  // read and written by the update. And its GEMM work: 6 FLOPs per parameter and token, 2 more
  // for the recomputed forward, plus attention's 12 L T C per token (8 with the recompute's 4).
  const double grads_on_nvme = o.grads == "nvme" ? 1.0 : 0.0;
  const double must_read = 4.0 * n * (2.0 + 2.0 * grads_on_nvme + 3.0);
  const double must_write = 4.0 * n * (grads_on_nvme + 3.0);
  const double tokens = static_cast<double>(o.batch * o.seq);
  const double attn = 16.0 * static_cast<double>(shape.num_layers) * static_cast<double>(o.seq) *
                      static_cast<double>(shape.channels);
  const double flops = tokens * (8.0 * n + attn);
  // The floor takes the fewer of the bytes the step must move and those it did move (the
  // optimizer hands some updated shards to the next forward without a read, so a run can move
  // less than the analytic count): it may only be lower than the step could be.
  const double floor_read = std::min(must_read, moved_read > 0.0 ? moved_read : must_read);
  const double floor_write = std::min(must_write, moved_write > 0.0 ? moved_write : must_write);
  const double floor_s = floor_read / fio_read + floor_write / fio_write + flops / sgemm;
  const double budget = static_cast<double>(o.host_mem + o.device_mem);

  std::fprintf(stderr, "  %-40s %10.1f s\n", "step time (last of the long run)", step_s);
  std::fprintf(stderr, "  %-40s %10.1f s (%.1f s NVMe + %.1f s GEMM)\n", "floor", floor_s,
               floor_read / fio_read + floor_write / fio_write, flops / sgemm);
  std::fprintf(stderr, "  %-40s %10.2f\n", "ratio (floor / step, 1 = at the floor)",
               floor_s / step_s);
  std::fprintf(stderr, "  %-40s %10.2f GB/s read, %.2f GB/s write\n", "fio", fio_read / 1e9,
               fio_write / 1e9);
  std::fprintf(stderr, "  %-40s %10.1f GFLOP/s\n", "sgemm", sgemm / 1e9);
  std::fprintf(stderr, "  %-40s %10.2f GB read, %.2f GB written\n", "moved per step (measured)",
               moved_read / 1e9, moved_write / 1e9);
  std::fprintf(stderr, "  %-40s %10.2f GB read, %.2f GB written\n", "must move per step",
               must_read / 1e9, must_write / 1e9);
  std::fprintf(stderr, "  %-40s %10s (budgets: host %s + device %s)\n", "peak RSS",
               format_bytes(static_cast<size_t>(rss)).c_str(),
               format_bytes(static_cast<size_t>(o.host_mem)).c_str(),
               format_bytes(static_cast<size_t>(o.device_mem)).c_str());
  std::fprintf(stderr, "  %-40s %10.1f s / %.1f s\n", "wall (short run / long run)", short_wall,
               long_wall);
  nlohmann::ordered_json j = bench_result("oversize", round_to(step_s, 3), "s", "floor",
                                          round_to(floor_s, 3), floor_s / step_s);
  j["model"] = o.model;
  j["parameters"] = static_cast<int64_t>(n);
  j["state_bytes"] = static_cast<int64_t>(state_bytes);
  j["peak_rss_bytes"] = static_cast<int64_t>(rss);
  j["rss_over_budgets"] = round_to(rss / budget, 4);
  j["host_mem"] = o.host_mem;
  j["device_mem"] = o.device_mem;
  j["moved_read_bytes"] = static_cast<int64_t>(moved_read);
  j["moved_write_bytes"] = static_cast<int64_t>(moved_write);
  j["must_read_bytes"] = static_cast<int64_t>(must_read);
  j["must_write_bytes"] = static_cast<int64_t>(must_write);
  j["fio_read_gbs"] = round_to(fio_read / 1e9, 3);
  j["fio_write_gbs"] = round_to(fio_write / 1e9, 3);
  j["sgemm_gflops"] = round_to(sgemm / 1e9, 1);
  j["seq"] = o.seq;
  j["batch"] = o.batch;
  j["grads"] = o.grads;
  j["device"] = o.device;
  BenchReport report;
  report.emit(j);
  return report;
}

}  // namespace tierzero::bench
