// `tierzero plan`: the fastest configuration that fits the given memory budgets, with its predicted
// step time and why it was chosen, and the faster ones that would not fit. Optionally writes it as
// a TrainConfig JSON that `tierzero train --config` runs. Model: profile::plan (docs/estimator.md).
// With --check it trains the choice here for a few steps and prints the prediction's error.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "commands.hpp"
#include "estimate_model.hpp"
#include "plan_check.hpp"
#include "plan_kernel_times.hpp"
#include "plan_longest_seq.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/profile/planner.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/placement_from_config.hpp"

namespace tierzero::cli {

namespace {

struct PlanFlags {
  ModelFlags model;
  WorldFlags world;
  size_t device_mem = 0;
  size_t host_mem = 0;  // 0: the trainer's default, the rank's share of 80% of physical memory
  int64_t ranks_per_node = 0;  // ranks sharing a node's host memory; 0: every rank (one node)
  size_t nvme = 0;             // 0: NVMe offload is not considered
  std::string nvme_path = "/var/tmp/tierzero_nvme";
  int64_t seq = 0;  // 0: the model's context length
  int64_t global_batch = 32;
  double margin = 0.10;
  std::string calibration;
  std::string device;   // empty: cuda when a GPU is present, else cpu (said in the output)
  int64_t threads = 0;  // CPU kernel threads; 0: OpenMP's default (every core)
  std::string output;
  bool check = false;
  int64_t check_steps = 5;
  bool longest_seq = false;  // binary search for the longest sequence that fits
  std::string recompute;     // empty: every recompute mode searched; else only this one
};

// The step-time model's error that tests/profile/run_plan_time.sh holds it to: a small GPT on one
// CPU thread, predicted from the quick measurement against the measured median step (both as on
// an idle machine). Printed with every plan so its step times are read with it.
constexpr double kValidatedTimeError = 0.25;

// The device the plan is for: --device, else cuda when this machine has a GPU, else cpu; the
// reason goes into the printout, since the step times are measured on it.
std::string plan_device(const std::string& flag, std::string* why) {
  if (!flag.empty()) {
    *why = "--device";
    return flag;
  }
  std::string reason;
  if (cuda_device_count(&reason) > 0) {
    *why = "assumed: this machine's GPU; --device cpu plans for the CPU";
    return "cuda";
  }
  *why =
      "assumed: no GPU found, so these are this CPU's step times; for a GPU's, plan on it or "
      "pass --calibration";
  return "cpu";
}

// Creates `dir` for the rates' NVMe measurement; returns the topmost directory it created (to
// remove afterwards), or "" when it existed already.
std::string create_measurement_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path top;
  for (fs::path p = fs::absolute(dir); !p.empty() && !fs::exists(p); p = p.parent_path()) {
    top = p;
    if (p == p.parent_path()) break;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  TZ_CHECK(!ec, "cannot create the NVMe directory '" + dir + "': " + ec.message(),
           "give --nvme-path a directory on the NVMe drive that you may write");
  return top.string();
}

// The ranks that share one node's host memory: --ranks-per-node, else every rank of the plan.
size_t ranks_per_node(const PlanFlags& f) {
  if (f.ranks_per_node > 0) return static_cast<size_t>(f.ranks_per_node);
  return static_cast<size_t>(resolve_world(f.world).ranks());
}

nlohmann::json config_json(const PlanFlags& f, const nn::GPTConfig& m, size_t seq,
                           const profile::Candidate& c) {
  nlohmann::json off_param = {{"device", train::offload_device_name(c.placement.param.tier)}};
  nlohmann::json off_optim = {{"device", train::offload_device_name(c.placement.optimizer.tier)},
                              {"ratio", c.placement.optimizer.ratio}};
  if (c.placement.param.tier == Tier::nvme) off_param["nvme_path"] = f.nvme_path;
  if (c.placement.optimizer.tier == Tier::nvme) {
    off_optim["nvme_path"] = f.nvme_path;
    off_optim["buffer_size"] = c.placement.nvme_chunk_elems;
  }
  nlohmann::json j;
  j["train_micro_batch_size_per_gpu"] = c.micro_batch;
  j["gradient_accumulation_steps"] = c.accumulation;
  j["zero_optimization"] = {{"stage", c.stage},
                            {"offload_param", off_param},
                            {"offload_optimizer", off_optim},
                            {"stage3_max_live_parameters", c.max_live_parameters}};
  j["tierzero"] = {{"model",
                    {{"vocab_size", m.vocab_size},
                     {"padded_vocab_size", m.padded_vocab_size},
                     {"context_length", m.max_seq_len},
                     {"n_layer", m.num_layers},
                     {"n_head", m.num_heads},
                     {"n_embd", m.channels}}},
                   {"seq_len", seq},
                   {"device", f.device},
                   {"activation_checkpointing", c.checkpointing()},
                   {"recompute", profile::recompute_mode_name(c.recompute)},
                   {"tensor_parallel", f.world.tp > 0 ? f.world.tp : 1},
                   {"sequence_parallel", f.world.sequence_parallel},
                   {"pipeline_parallel", f.world.pp > 0 ? f.world.pp : 1},
                   {"ulysses_parallel", f.world.sp > 0 ? f.world.sp : 1},
                   {"device_memory_budget_gb", static_cast<double>(f.device_mem) / 1073741824.0}};
  // The host budget the plan fitted is a rank's; the trainer's is the node's, shared by its ranks.
  if (f.host_mem > 0)
    j["tierzero"]["host_memory_budget_gb"] =
        static_cast<double>(f.host_mem) * static_cast<double>(ranks_per_node(f)) / 1073741824.0;
  if (c.checkpointing() && c.checkpoint_tier != Tier::device) {
    j["tierzero"]["activation_checkpoints"] = {
        {"device", train::offload_device_name(c.checkpoint_tier)}};
    if (c.checkpoint_tier == Tier::nvme)
      j["tierzero"]["activation_checkpoints"]["nvme_path"] = f.nvme_path;
  }
  if (f.threads > 0) j["tierzero"]["threads"] = f.threads;
  if (c.grads_on_nvme()) j["tierzero"]["offload_gradients"] = "nvme";
  return j;
}

void print_bytes_vs_budget(const profile::PlanRequest& req, const profile::Estimate& e) {
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) {
    const size_t need = e.tier_total(t), budget = req.budget[static_cast<size_t>(t)];
    const auto usable = static_cast<size_t>(static_cast<double>(budget) * (1.0 - req.margin));
    std::printf("    %-7s %12s of %12s usable (budget %s)   model state %s, buffers %s\n",
                tier_name(t), format_bytes(need).c_str(), format_bytes(usable).c_str(),
                format_bytes(budget).c_str(), format_bytes(e.persistent.tier_total(t)).c_str(),
                format_bytes(e.buffers.tier_total(t)).c_str());
  }
}

// Sequence lengths the layout can cut: Megatron sequence parallelism splits the tokens over tp,
// Ulysses each sequence over sp.
size_t seq_quantum(const PlanFlags& f, const profile::WorldLayout& world) {
  const size_t tp = f.world.sequence_parallel ? static_cast<size_t>(world.tp) : 1;
  return std::lcm(tp, static_cast<size_t>(world.sp));
}

int run_plan(const PlanFlags& flags) {
  PlanFlags f = flags;
  std::string device_why;
  f.device = plan_device(flags.device, &device_why);
  if (!f.calibration.empty() && flags.device.empty())
    device_why = "assumed, written to -o; the rates come from --calibration";
  const nn::GPTConfig model = resolve_model(f.model, nullptr);
  const profile::WorldLayout world = resolve_world(f.world);
  size_t seq = f.seq > 0 ? static_cast<size_t>(f.seq) : model.max_seq_len;
  TZ_CHECK(seq <= model.max_seq_len,
           "sequence length " + std::to_string(seq) + " exceeds the model's context " +
               std::to_string(model.max_seq_len),
           "lower --seq or raise --context");

  TZ_CHECK(!f.world.sequence_parallel || world.tp == 1 || seq % static_cast<size_t>(world.tp) == 0,
           "--sequence-parallel cuts each micro-batch's tokens over --tp " +
               std::to_string(world.tp) + ", which does not divide --seq " + std::to_string(seq),
           "choose a sequence length that is a multiple of the tensor-parallel size");
  // Before the measurements: an output that cannot be written is found now, not after them.
  if (!f.output.empty()) train::check_output_file("-o", f.output, {f.calibration});
  profile::PlanRequest req;
  // The config the plan writes, before its choices: the trainer's defaults on the plan's device.
  train::TrainConfig planned = train::TrainConfig::defaults();
  planned.device = f.device;
  req.base = train::estimate_input_from(
      planned,
      train::model_units(model, 1, static_cast<size_t>(world.tp), static_cast<size_t>(world.pp)),
      world, 0);
  req.seq_len = seq;
  req.target_global_batch = static_cast<size_t>(f.global_batch);
  req.margin = f.margin;
  // Without --host-mem, what the trainer gives each rank of a node by default.
  const size_t host_budget =
      f.host_mem > 0
          ? f.host_mem
          : train::host_budget_per_rank(train::node_host_budget_bytes(planned), ranks_per_node(f));
  req.budget = {f.device_mem, host_budget, f.nvme};
  req.activation_bytes = [&](size_t b, profile::RecomputeMode r) {
    return train::activation_bytes(model, b, seq, train::recompute_of(r), world,
                                   f.world.sequence_parallel);
  };
  req.placed_checkpoints = [&](size_t b, Tier tier) {
    const train::ActivationEstimate a = train::activation_estimate_for(
        model, b, seq, nn::Recompute(nn::Recompute::full), world, f.world.sequence_parallel, {},
        tier, static_cast<size_t>(planned.activation_checkpoints.buffer_count));
    return profile::PlanRequest::PlacedActivations{a.activation_bytes, a.checkpoints};
  };
  TZ_CHECK(f.recompute.empty() || !f.longest_seq,
           "--recompute and --longest-seq together: --longest-seq searches each mode already",
           "drop --recompute");
  if (!f.recompute.empty())
    req.only_recompute =
        static_cast<size_t>(f.recompute == "none"        ? profile::RecomputeMode::none
                            : f.recompute == "selective" ? profile::RecomputeMode::selective
                                                         : profile::RecomputeMode::full);
  if (f.longest_seq) return print_longest_seq(req, seq, model.max_seq_len, seq_quantum(f, world));
  req.tensor_parallel_wire_bytes = [&](size_t b, profile::RecomputeMode r) {
    return train::tensor_parallel_wire_bytes(model, b, seq, train::recompute_of(r), world,
                                             f.world.sequence_parallel);
  };
  req.ulysses_wire_bytes = [&](size_t b, profile::RecomputeMode r) {
    return train::ulysses_wire_bytes(model, b, seq, train::recompute_of(r), world);
  };
  TZ_CHECK(!f.check || world.ranks() == 1,
           "plan --check trains the chosen configuration in this process, on one rank; this plan "
           "is for " +
               std::to_string(world.ranks()) + " ranks",
           "run the written config under mpiexec with `tierzero train --metrics` and compare its "
           "step times with the prediction, or plan for one rank");
  kernels::cpu::set_threads(static_cast<int>(f.threads));  // also for the CPU Adam on a GPU
  LayerKernelTimes layer;
  if (!f.calibration.empty()) {
    req.rates = profile::load_calibration(f.calibration);
  } else {
    std::unique_ptr<Device> dev = make_device(f.device, static_cast<int>(f.threads));
    std::string nvme_dir, created;
    if (f.nvme > 0) {
      created = create_measurement_dir(f.nvme_path);
      nvme_dir = f.nvme_path;
    }
    try {
      req.rates = profile::measure_rates(*dev, nvme_dir);
    } catch (...) {
      if (!created.empty()) std::filesystem::remove_all(created);
      throw;
    }
    std::error_code ec;  // what the measurement created goes; a directory that was there stays
    if (!created.empty()) std::filesystem::remove_all(created, ec);
    layer = measure_layer_kernels(*dev, model, seq, world);
    req.other_kernel_seconds = [&](size_t b, profile::RecomputeMode r) {
      return other_kernel_seconds(layer, b, r);
    };
  }
  const profile::Rates& r = req.rates;

  std::printf("plan     %s on %d ranks (dp %d, tp %d, pp %d, sp %d), seq %zu, global batch %lld\n",
              model.str().c_str(), world.ranks(), world.dp, world.tp, world.pp, world.sp, seq,
              static_cast<long long>(f.global_batch));
  std::printf("device   %s (%s)\n", f.device.c_str(), device_why.c_str());
  std::printf("budgets  device %s, host %s, nvme %s; a tier fits at <= %.0f%% of its budget\n",
              format_bytes(req.budget[0]).c_str(), format_bytes(req.budget[1]).c_str(),
              format_bytes(req.budget[2]).c_str(), 100.0 * (1.0 - req.margin));
  std::printf(
      "rates    (%s) gemm %.1f GFLOP/s, copy %.2f GB/s, nvme read %.2f / write %.2f GB/s, "
      "cpu adam %.2f GB/s, comm %.2f GB/s\n",
      r.source.c_str(), r.gemm_gflops, r.copy_gbps, r.nvme_read_gbps, r.nvme_write_gbps,
      r.adam_cpu_gbps, r.comm_gbps);
  if (layer.layers > 0)
    std::printf(
        "kernels  per layer and sequence: attention %.2f ms forward + %.2f ms backward, GELU "
        "%.2f + %.2f ms (%d CPU threads)\n",
        layer.attention_forward_s * 1e3, layer.attention_backward_s * 1e3,
        layer.gelu_forward_s * 1e3, layer.gelu_backward_s * 1e3, kernels::cpu::threads());
  else
    std::printf("kernels  outside the GEMMs: not counted (rates from --calibration)\n");

  const profile::PlanResult result = profile::plan(req);
  std::printf("searched %zu configurations, %zu fit\n", result.considered, result.fitting);
  if (result.rejected.empty()) std::printf("every configuration searched fits\n");
  if (!result.rejected.empty()) {
    std::printf("\nthe fastest that would not fit:\n");
    for (const profile::Candidate& c : result.rejected) {
      const size_t budget = req.budget[static_cast<size_t>(c.overflow)];
      std::printf(
          "  %s: %.1f ms/step, %s needs %s > %s usable of %s\n", c.describe().c_str(),
          c.time.total_s * 1e3, tier_name(c.overflow), format_bytes(c.overflow_bytes).c_str(),
          format_bytes(static_cast<size_t>(static_cast<double>(budget) * (1.0 - req.margin)))
              .c_str(),
          format_bytes(budget).c_str());
    }
  }
  TZ_CHECK(result.found, "no configuration of this model fits the given budgets",
           "give more --device-mem, --host-mem or --nvme, more --ranks, or a shorter --seq");
  const profile::Candidate& b = result.best;
  const double tokens = static_cast<double>(b.micro_batch * b.accumulation * seq) * world.dp;
  std::printf("\nchosen   %s\n", b.describe().c_str());
  std::printf(
      "why      fastest per token of those that fit: predicted step %.1f ms for %.0f "
      "tokens (%.0f tokens/s)\n",
      b.time.total_s * 1e3, tokens, tokens / b.time.total_s);
  std::printf(
      "    compute %.1f ms (GEMMs %.1f, attention and GELU %.1f) + exposed transfer %.1f ms (of "
      "%.1f ms, the rest overlaps compute) + optimizer %.1f ms\n",
      b.time.compute_s * 1e3, b.time.gemm_s * 1e3, b.time.other_kernels_s * 1e3,
      b.time.exposed_s * 1e3, b.time.transfer_s * 1e3, b.time.optimizer_s * 1e3);
  if (world.tp > 1)
    std::printf("    + tensor-parallel collectives %.1f ms (on the critical path)\n",
                b.time.tensor_parallel_s * 1e3);
  if (world.sp > 1)
    std::printf("    + Ulysses all-to-alls %.1f ms (on the critical path)\n",
                b.time.ulysses_s * 1e3);
  if (world.pp > 1)
    std::printf("    + pipeline bubble %.1f ms ((pp - 1) / m of the compute, 1F1B)\n",
                b.time.pipeline_bubble_s * 1e3);
  std::printf(
      "error    step times are predicted for a machine the run has to itself; tests hold the "
      "model to within %.0f%% of a measured step (a small GPT, one CPU thread); `plan --check` "
      "trains the choice for a few steps and prints this plan's own error\n",
      100.0 * kValidatedTimeError);
  std::printf("  bytes per rank vs budget:\n");
  print_bytes_vs_budget(req, b.estimate);
  if (!f.output.empty()) {
    write_file_atomic(f.output, config_json(f, model, seq, b).dump(2) + "\n");
    std::printf("\nwrote    %s (run it with `tierzero train --config %s`)\n", f.output.c_str(),
                f.output.c_str());
  }
  if (f.check) {
    std::fflush(stdout);
    const PlanCheck k = run_plan_check(config_json(f, model, seq, b), 1, f.check_steps);
    const double predicted = b.time.total_s;
    std::printf(
        "\ncheck    trained the choice here for %lld + %lld steps (%d CPU threads); median step "
        "%.1f ms wall, %.1f ms CPU time per thread\n",
        static_cast<long long>(k.warmup), static_cast<long long>(k.steps), k.threads,
        k.wall_s * 1e3, k.cpu_s * 1e3);
    std::printf(
        "check    predicted %.1f ms vs measured %.1f ms on an idle machine (the lower of the "
        "two): error %+.1f%%, ratio measured / predicted %.2f\n",
        predicted * 1e3, k.idle_s * 1e3, 100.0 * (predicted - k.idle_s) / k.idle_s,
        k.idle_s / predicted);
    if (k.wall_s > 1.2 * k.idle_s)
      std::printf(
          "check    the wall time was %.0f%% longer: other processes shared this machine's "
          "cores\n",
          100.0 * (k.wall_s / k.idle_s - 1.0));
  }
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* sub = app.add_subcommand(
      "plan", "the fastest stage, placement and batch that fit the given memory budgets");
  add_model_options(*sub, f->model);
  add_world_options(*sub, f->world);
  sub->add_option("--device-mem", f->device_mem, "device memory per rank, e.g. 24GiB")
      ->transform(CLI::AsSizeValue(false))
      ->required();
  sub->add_option("--host-mem", f->host_mem,
                  "pinned host memory per rank (default: as the trainer, the rank's share of 80% "
                  "of physical memory); written to -o as the node's budget")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--ranks-per-node", f->ranks_per_node,
                  "ranks that share one node's host memory (default: every rank, one node)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--nvme", f->nvme, "NVMe swap space per rank (default 0: no NVMe offload)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--nvme-path", f->nvme_path, "directory on the NVMe drive")
      ->capture_default_str();
  sub->add_option("--seq", f->seq, "tokens per sequence (default: the model's context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--global-batch", f->global_batch, "sequences per optimizer step, all ranks")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--margin", f->margin, "fraction of each budget kept free")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  sub->add_option("--calibration", f->calibration,
                  "rates file: `tierzero bench` JSON lines or an object of rates "
                  "(default: measure quickly)");
  sub->add_option("--device", f->device,
                  "cpu, cuda or cuda:N: measured, and written to -o (default: cuda when this "
                  "machine has a GPU, else cpu)");
  sub->add_option("--threads", f->threads,
                  "CPU kernel threads, measured with and written to -o (default: every core)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  sub->add_option("-o,--output", f->output, "write the chosen configuration as a config JSON");
  sub->add_flag("--check", f->check,
                "train the choice here for 1 + --check-steps steps and print the predicted step "
                "time's error (one rank)");
  sub->add_flag("--longest-seq", f->longest_seq,
                "the longest sequence (up to the model's context) this model trains at with "
                "these budgets, by the estimator, with the placement chosen there, for "
                "checkpoints on each tier");
  sub->add_option("--recompute", f->recompute,
                  "search only this recompute mode: none, selective or full (default: all three)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  sub->add_option("--check-steps", f->check_steps, "steps --check measures after one warm-up")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  return {sub, [f] { return run_plan(*f); }};
}

}  // namespace tierzero::cli
