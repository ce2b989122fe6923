// plan_report (plan_report.hpp): settings -> rates -> planner -> one JSON object.
#include "plan_report.hpp"

#include <filesystem>
#include <numeric>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/output_paths.hpp"
#include "tierzero/train/placement_from_config.hpp"

namespace tierzero::cli {

// A small GPT on one CPU thread, predicted from the quick measurement against the measured median
// step (both as on an idle machine). Printed with every plan so its step times are read with it.
// 0.25 held on the AMD EPYC VMs; the Intel Xeon VM of 2026-11-28 gave -8% to -38%
// (docs/estimator.md).
const double kValidatedTimeError = 0.45;

namespace {

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
  if (f.precision == "bf16") j["bf16"] = {{"enabled", true}};
  if (f.precision == "fp16") j["fp16"] = {{"enabled", true}};  // dynamic loss scaling
  return j;
}

nlohmann::json tier_bytes_json(const profile::PlanRequest& req, const profile::Estimate& e) {
  nlohmann::json out = nlohmann::json::object();
  for (Tier t : {Tier::device, Tier::host, Tier::nvme}) {
    const size_t budget = req.budget[static_cast<size_t>(t)];
    out[tier_name(t)] = {
        {"need", e.tier_total(t)},
        {"usable", static_cast<size_t>(static_cast<double>(budget) * (1.0 - req.margin))},
        {"budget", budget},
        {"model_state", e.persistent.tier_total(t)},
        {"buffers", e.buffers.tier_total(t)}};
  }
  return out;
}

nlohmann::json candidate_json(const profile::Candidate& c) {
  const profile::StepTime& t = c.time;
  return {{"describe", c.describe()},
          {"stage", c.stage},
          {"offload_param", train::offload_device_name(c.placement.param.tier)},
          {"offload_param_ratio", c.placement.param.ratio},
          {"offload_optimizer", train::offload_device_name(c.placement.optimizer.tier)},
          {"offload_optimizer_ratio", c.placement.optimizer.ratio},
          {"checkpointing", c.checkpointing()},
          {"recompute", profile::recompute_mode_name(c.recompute)},
          {"checkpoint_tier", tier_name(c.checkpoint_tier)},
          {"micro_batch", c.micro_batch},
          {"accumulation", c.accumulation},
          {"max_live_parameters", c.max_live_parameters},
          {"step_s", t.total_s},
          {"time",
           {{"compute_s", t.compute_s},
            {"gemm_s", t.gemm_s},
            {"other_kernels_s", t.other_kernels_s},
            {"exposed_s", t.exposed_s},
            {"transfer_s", t.transfer_s},
            {"optimizer_s", t.optimizer_s},
            {"tensor_parallel_s", t.tensor_parallel_s},
            {"ulysses_s", t.ulysses_s},
            {"pipeline_bubble_s", t.pipeline_bubble_s}}}};
}

}  // namespace

size_t seq_quantum(const PlanSetup& s) {
  const size_t tp = s.flags.world.sequence_parallel ? static_cast<size_t>(s.world.tp) : 1;
  return std::lcm(tp, static_cast<size_t>(s.world.sp));
}

std::unique_ptr<PlanSetup> prepare_plan(const PlanFlags& flags) {
  auto setup = std::make_unique<PlanSetup>();
  PlanSetup* s = setup.get();  // the request's functions read it: it does not move
  s->flags = flags;
  PlanFlags& f = s->flags;
  f.device = plan_device(flags.device, &s->device_why);
  if (!f.calibration.empty() && flags.device.empty())
    s->device_why = "assumed, written to -o; the rates come from --calibration";
  s->model = resolve_model(f.model, nullptr);
  s->world = resolve_world(f.world);
  const nn::GPTConfig& model = s->model;
  const profile::WorldLayout& world = s->world;
  s->seq = f.seq > 0 ? static_cast<size_t>(f.seq) : model.max_seq_len;
  TZ_CHECK(s->seq <= model.max_seq_len,
           "sequence length " + std::to_string(s->seq) + " exceeds the model's context " +
               std::to_string(model.max_seq_len),
           "lower --seq or raise --context");
  TZ_CHECK(
      !f.world.sequence_parallel || world.tp == 1 || s->seq % static_cast<size_t>(world.tp) == 0,
      "--sequence-parallel cuts each micro-batch's tokens over --tp " + std::to_string(world.tp) +
          ", which does not divide --seq " + std::to_string(s->seq),
      "choose a sequence length that is a multiple of the tensor-parallel size");
  profile::PlanRequest& req = s->req;
  // The config the plan writes, before its choices: the trainer's defaults on the plan's device,
  // in the asked precision.
  train::TrainConfig& planned = s->planned;
  planned = train::TrainConfig::defaults();
  planned.device = f.device;
  train::set_precision(planned, f.precision);
  // The dtype the planned config computes in on its device (its activations and collectives).
  s->compute = train::compute_dtype_for(planned, train::device_kind_of(planned.device));
  const DType compute = s->compute;
  req.base = train::estimate_input_from(
      planned,
      train::model_units(model, 1, static_cast<size_t>(world.tp), static_cast<size_t>(world.pp)),
      world, 0);
  req.base.compute = compute;  // 16-bit compute widens no unit to fp32 for use
  req.seq_len = s->seq;
  req.target_global_batch = static_cast<size_t>(f.global_batch);
  req.margin = f.margin;
  // Without --host-mem, what the trainer gives each rank of a node by default.
  const size_t host_budget =
      f.host_mem > 0
          ? f.host_mem
          : train::host_budget_per_rank(train::node_host_budget_bytes(planned), ranks_per_node(f));
  req.budget = {f.device_mem, host_budget, f.nvme};
  req.activation_bytes = [s, compute](size_t b, profile::RecomputeMode r) {
    return train::activation_bytes(s->model, b, s->seq, train::recompute_of(r), s->world,
                                   s->flags.world.sequence_parallel, {}, compute);
  };
  const auto checkpoint_buffers = static_cast<size_t>(planned.activation_checkpoints.buffer_count);
  req.placed_checkpoints = [s, checkpoint_buffers, compute](size_t b, Tier tier) {
    const train::ActivationEstimate a = train::activation_estimate_for(
        s->model, b, s->seq, nn::Recompute(nn::Recompute::full), s->world,
        s->flags.world.sequence_parallel, {}, tier, checkpoint_buffers, compute);
    return profile::PlanRequest::PlacedActivations{a.activation_bytes, a.checkpoints};
  };
  req.tensor_parallel_wire_bytes = [s, compute](size_t b, profile::RecomputeMode r) {
    return train::tensor_parallel_wire_bytes(s->model, b, s->seq, train::recompute_of(r), s->world,
                                             s->flags.world.sequence_parallel, compute);
  };
  req.ulysses_wire_bytes = [s, compute](size_t b, profile::RecomputeMode r) {
    return train::ulysses_wire_bytes(s->model, b, s->seq, train::recompute_of(r), s->world,
                                     compute);
  };
  TZ_CHECK(f.recompute.empty() || f.recompute == "none" || f.recompute == "selective" ||
               f.recompute == "full",
           "recompute '" + f.recompute + "' is not a recompute mode",
           "use none, selective or full (or leave it out to search all three)");
  TZ_CHECK(f.recompute.empty() || !f.longest_seq,
           "--recompute and --longest-seq together: --longest-seq searches each mode already",
           "drop --recompute");
  if (!f.recompute.empty())
    req.only_recompute =
        static_cast<size_t>(f.recompute == "none"        ? profile::RecomputeMode::none
                            : f.recompute == "selective" ? profile::RecomputeMode::selective
                                                         : profile::RecomputeMode::full);
  return setup;
}

nlohmann::json plan_report(PlanSetup& s) {
  const PlanFlags& f = s.flags;
  profile::PlanRequest& req = s.req;
  kernels::cpu::set_threads(static_cast<int>(f.threads));  // also for the CPU Adam on a GPU
  s.layer = LayerKernelTimes{};
  if (!f.calibration.empty()) {
    req.rates = profile::load_calibration(f.calibration);
  } else {
    std::unique_ptr<Device> dev = make_device(f.device, static_cast<int>(f.threads));
    // The products at the precision the planned config runs them (as the trainer sets it).
    dev->kernels().set_matmul_precision(train::matmul_precision_for(s.planned));
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
    s.layer = measure_layer_kernels(*dev, s.model, s.seq, s.world, s.compute);
    // The plan's GEMM time at the rate its own products reach (one sequence: the smallest
    // micro-batch's), not a large square product's.
    if (s.layer.block_gemm_flops_per_s > 0.0) {
      req.rates.gemm_gflops = s.layer.block_gemm_flops_per_s / 1e9;
      req.rates.source += ", GEMM at the block's shapes";
      if (s.compute != DType::f32) req.rates.source += std::string(" in ") + dtype_name(s.compute);
    }
    req.other_kernel_seconds = [&s](size_t b, profile::RecomputeMode r) {
      return other_kernel_seconds(s.layer, b, r);
    };
  }
  const profile::Rates& r = req.rates;
  const profile::PlanResult result = profile::plan(req);

  nlohmann::json j;
  j["model"] = s.model.str();
  j["world"] = {{"ranks", s.world.ranks()},
                {"dp", s.world.dp},
                {"tp", s.world.tp},
                {"pp", s.world.pp},
                {"sp", s.world.sp}};
  j["seq"] = s.seq;
  j["global_batch"] = f.global_batch;
  j["device"] = f.device;
  j["device_why"] = s.device_why;
  j["precision"] = {{"working", dtype_name(train::working_dtype(s.planned))},
                    {"compute", dtype_name(s.compute)}};
  j["budgets"] = {{"device", req.budget[0]}, {"host", req.budget[1]}, {"nvme", req.budget[2]}};
  j["margin"] = req.margin;
  j["rates"] = {{"source", r.source},
                {"gemm_gflops", r.gemm_gflops},
                {"copy_gbps", r.copy_gbps},
                {"nvme_read_gbps", r.nvme_read_gbps},
                {"nvme_write_gbps", r.nvme_write_gbps},
                {"adam_cpu_gbps", r.adam_cpu_gbps},
                {"comm_gbps", r.comm_gbps}};
  j["kernels"] = nullptr;  // not measured: the rates came from --calibration
  if (s.layer.layers > 0)
    j["kernels"] = {{"attention_forward_s", s.layer.attention_forward_s},
                    {"attention_backward_s", s.layer.attention_backward_s},
                    {"gelu_forward_s", s.layer.gelu_forward_s},
                    {"gelu_backward_s", s.layer.gelu_backward_s},
                    // what gelu_* timed: the MLP's activation, and whether 16-bit compute folded
                    // it into the products (then 0)
                    {"activation", s.model.arch.mlp == nn::MlpKind::swiglu ? "swiglu"
                                   : s.compute != DType::f32 ? "gelu (in the products)"
                                                             : "gelu"},
                    {"layers", s.layer.layers},
                    {"block_gemm_gflops", s.layer.block_gemm_flops_per_s / 1e9},
                    {"threads", kernels::cpu::threads()}};
  j["considered"] = result.considered;
  j["fitting"] = result.fitting;
  j["rejected"] = nlohmann::json::array();
  for (const profile::Candidate& c : result.rejected) {
    nlohmann::json k = candidate_json(c);
    const size_t budget = req.budget[static_cast<size_t>(c.overflow)];
    k["overflow"] = {
        {"tier", tier_name(c.overflow)},
        {"need", c.overflow_bytes},
        {"usable", static_cast<size_t>(static_cast<double>(budget) * (1.0 - req.margin))},
        {"budget", budget}};
    j["rejected"].push_back(k);
  }
  j["found"] = result.found;
  j["validated_time_error"] = kValidatedTimeError;
  if (!result.found) return j;
  const profile::Candidate& b = result.best;
  const double tokens = static_cast<double>(b.micro_batch * b.accumulation * s.seq) * s.world.dp;
  j["chosen"] = candidate_json(b);
  j["chosen"]["tokens"] = tokens;
  j["chosen"]["tokens_per_s"] = tokens / b.time.total_s;
  j["chosen"]["tiers"] = tier_bytes_json(req, b.estimate);
  j["config"] = config_json(f, s.model, s.seq, b);
  return j;
}

void check_plan_found(const nlohmann::json& report) {
  TZ_CHECK(report.at("found").get<bool>(), "no configuration of this model fits the given budgets",
           "give more --device-mem, --host-mem or --nvme, more --ranks, or a shorter --seq");
}

}  // namespace tierzero::cli
