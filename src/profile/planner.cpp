// The planner: enumeration, fit test and step-time model (see planner.hpp, docs/estimator.md).
#include "tierzero/profile/planner.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::profile {

namespace {

const char* offload_device_name(Tier t) {
  return t == Tier::device ? "none" : t == Tier::host ? "cpu" : "nvme";
}

// Fraction of the units `ratio` offloads, as place_units rounds it.
double offloaded_fraction(const zero::OffloadTarget& target, size_t units) {
  if (target.tier == Tier::device || units == 0) return 0.0;
  return static_cast<double>(zero::offloaded_unit_count(units, target.ratio)) /
         static_cast<double>(units);
}

}  // namespace

const char* recompute_mode_name(RecomputeMode mode) {
  return mode == RecomputeMode::none        ? "none"
         : mode == RecomputeMode::selective ? "selective"
                                            : "full";
}

std::string Candidate::describe() const {
  char buf[256];
  std::string param = placement.param.tier == Tier::device
                          ? "param device"
                          : std::string("param ") + offload_device_name(placement.param.tier);
  char optim[64];
  if (placement.optimizer.tier == Tier::device)
    std::snprintf(optim, sizeof optim, "optimizer device");
  else
    std::snprintf(
        optim, sizeof optim, "optimizer %s %.2g%s", offload_device_name(placement.optimizer.tier),
        placement.optimizer.ratio,
        placement.optimizer.tier == Tier::nvme && placement.nvme_chunk_elems == kSmallNvmeChunk
            ? " (chunk 16M elements)"
            : "");
  std::snprintf(buf, sizeof buf, "stage %d, %s, %s%s, %s, micro-batch %zu x %zu accumulation%s",
                stage, param.c_str(), optim, grads_on_nvme() ? ", gradients nvme" : "",
                recompute == RecomputeMode::none        ? "no recompute"
                : recompute == RecomputeMode::selective ? "selective recompute"
                : checkpoint_tier == Tier::device       ? "checkpointing"
                : checkpoint_tier == Tier::host         ? "checkpointing (checkpoints on the host)"
                                                        : "checkpointing (checkpoints on nvme)",
                micro_batch, accumulation,
                stage == 3 && max_live_parameters == 0 ? ", stage3_max_live_parameters 0" : "");
  return buf;
}

StepTime predict_step_time(const PlanRequest& req, const Candidate& c) {
  const Rates& r = req.rates;
  const Estimate& e = c.estimate;
  const WorldLayout& w = req.base.world;
  const double N = static_cast<double>(w.partition_group());
  const double psi = static_cast<double>(e.parameters);
  // Bytes per element moved: parameters in the working type (bf16 / fp16 training gathers and
  // fetches its 16-bit copy), reduced gradients in the reductions' communication type (which MPI
  // on host memory widens to fp32), gradient shards (the accumulators) in fp32.
  const double param_size = static_cast<double>(dtype_size(c.placement.working));
  const double reduce_size =
      req.base.host_widening ? 4.0 : static_cast<double>(dtype_size(req.base.reduce_dtype));
  const double full_params = static_cast<double>(e.full_elems) * param_size;
  const double full_grads = static_cast<double>(e.full_elems) * reduce_size;
  // At stage 0 every rank updates all parameters; from stage 1 its shard.
  const double opt_elems = static_cast<double>(c.stage == 0 ? e.full_elems : e.shard_elems);
  const double shard_params = static_cast<double>(e.shard_elems) * param_size;
  const double shard_bytes = static_cast<double>(e.shard_elems) * 4.0;
  const double tokens = static_cast<double>(c.micro_batch * req.seq_len) / w.sp;  // per rank
  const double micro = static_cast<double>(c.accumulation);
  const double ring = N > 1 ? (N - 1) / N : 0.0;  // bus fraction of a ring collective
  const double comm_bps = r.comm_gbps * 1e9, copy_bps = r.copy_gbps * 1e9;
  const double f_param = offloaded_fraction(c.placement.param, e.units);
  const double f_optim = offloaded_fraction(c.placement.optimizer, e.units);

  StepTime t;
  // 6 FLOPs per parameter per token (2 forward, 4 backward), 2 more to recompute the forward
  // (full recompute); selective recompute runs no GEMM again, only the attention's core, which
  // other_kernel_seconds counts.
  t.gemm_s = micro * (c.checkpointing() ? 8.0 : 6.0) * psi * tokens / (r.gemm_gflops * 1e9);
  if (req.other_kernel_seconds)
    t.other_kernels_s = micro * req.other_kernel_seconds(c.micro_batch, c.recompute);
  t.compute_s = t.gemm_s + t.other_kernels_s;

  double per_micro = 0.0;
  if (c.stage == 3) {
    per_micro += 2.0 * full_params * ring / comm_bps;     // all-gather in forward and in backward
    const double fetched = 2.0 * f_param * shard_params;  // the offloaded shards, both passes
    if (c.placement.param.tier != Tier::device) per_micro += fetched / copy_bps;
    if (c.placement.param.tier == Tier::nvme) per_micro += fetched / (r.nvme_read_gbps * 1e9);
  }
  if (c.stage >= 2) {
    per_micro += full_grads * ring / comm_bps;      // reduce-scatter
    per_micro += f_optim * shard_bytes / copy_bps;  // the host grad shard accumulator
  }
  // Gradient shards on NVMe: each micro-step writes them, and from the second on reads them first
  // to add (once more each step in the update, with m and v).
  double nvme_grad_s = 0.0;
  if (c.grads_on_nvme()) {
    nvme_grad_s = micro * f_optim * shard_bytes / (r.nvme_write_gbps * 1e9) +
                  (micro - 1.0) * f_optim * shard_bytes / (r.nvme_read_gbps * 1e9);
  }
  double per_step = 0.0;
  if (c.stage <= 1) {
    per_step += 2.0 * full_grads * ring / comm_bps;  // all-reduce after the last micro-step
    per_step += f_optim * shard_bytes / copy_bps;    // the rank's slice to the host
  }
  // Block checkpoints on a tier: written out in the forward and read back in the backward,
  // behind compute (write-behind, read-ahead).
  const CheckpointPlacementInput& ck = c.estimate_checkpoints;
  if (ck.tier != Tier::device) {
    const double moved = static_cast<double>(ck.stored * ck.bytes);
    per_micro += 2.0 * moved / copy_bps;
    if (ck.tier == Tier::nvme)
      per_micro += moved / (r.nvme_write_gbps * 1e9) + moved / (r.nvme_read_gbps * 1e9);
  }
  t.transfer_s = micro * per_micro + per_step + nvme_grad_s;
  // Units are gathered ahead and reduced behind compute, so per unit the step takes the longer
  // of its compute and its transfers; with units alike that sums to max(compute, transfer).
  t.exposed_s = std::max(0.0, t.transfer_s - t.compute_s);

  // The optimizer step follows backward and is not overlapped with it. 30 bytes per parameter
  // (bench adam.cpu's count); NVMe-resident states are read and written (m, v, master: 12 B
  // each way) while the CPU updates, so the slower of the two counts; every offloaded shard's
  // updated parameters go back to the device (in the working type) unless they live with them.
  const double dev_elems = (1.0 - f_optim) * opt_elems, off_elems = f_optim * opt_elems;
  t.optimizer_s = dev_elems * 30.0 / (r.device_adam_gbps() * 1e9);
  if (off_elems > 0) {
    double adam = off_elems * 30.0 / (r.adam_cpu_gbps * 1e9);
    if (c.placement.optimizer.tier == Tier::nvme) {
      const double read_bytes = c.grads_on_nvme() ? 16.0 : 12.0;  // m, v, master (+ gradient)
      // m, v, master; with 16-bit parameters on NVMe too, their new shard beside the master
      const bool own_shard =
          c.placement.working != DType::f32 && c.placement.param.tier == Tier::nvme;
      const double write_bytes = 12.0 + (own_shard ? param_size : 0.0);
      adam = std::max(adam, off_elems * read_bytes / (r.nvme_read_gbps * 1e9) +
                                off_elems * write_bytes / (r.nvme_write_gbps * 1e9));
    }
    const bool param_with_optimizer = c.placement.param.tier == c.placement.optimizer.tier;
    if (!param_with_optimizer) adam += off_elems * param_size / copy_bps;
    t.optimizer_s += adam;
  }
  // Stages 1-2: each rank updated its slice of the full parameters, all-gathered before the step
  // returns (not behind compute).
  if (c.stage == 1 || c.stage == 2) t.optimizer_s += full_params * ring / comm_bps;
  if (req.tensor_parallel_wire_bytes && w.tp > 1)
    t.tensor_parallel_s =
        micro * req.tensor_parallel_wire_bytes(c.micro_batch, c.recompute) / comm_bps;
  if (req.ulysses_wire_bytes && w.sp > 1)
    t.ulysses_s = micro * req.ulysses_wire_bytes(c.micro_batch, c.recompute) / comm_bps;
  if (w.pp > 1) t.pipeline_bubble_s = t.compute_s * static_cast<double>(w.pp - 1) / micro;
  t.total_s = t.compute_s + t.exposed_s + t.optimizer_s + t.tensor_parallel_s + t.ulysses_s +
              t.pipeline_bubble_s;
  const double step_tokens =
      micro * static_cast<double>(c.micro_batch * req.seq_len) * w.dp;  // all ranks
  t.per_token_s = t.total_s / step_tokens;
  return t;
}

PlanResult plan(const PlanRequest& req, size_t keep_rejected) {
  TZ_CHECK(static_cast<bool>(req.activation_bytes), "plan: no activation byte function",
           "the caller supplies activation bytes per (micro-batch, recompute mode)");
  TZ_CHECK(req.target_global_batch >= 1, "plan: target global batch is 0",
           "ask for at least one sequence per step");
  TZ_CHECK(req.budget[0] > 0, "plan: the device memory budget is 0", "give --device-mem");
  const auto dp = static_cast<size_t>(req.base.world.dp);
  // Sequences per rank per step, rounded up: dp x micro x accumulation is at least the target
  // (exactly it when dp and the micro-batch divide it; the report says the batch it chose).
  const size_t per_rank_batch = (req.target_global_batch + dp - 1) / dp;

  std::vector<zero::OffloadTarget> param_options = {
      {Tier::device, 1.0}, {Tier::host, 1.0}, {Tier::nvme, 1.0}};
  std::vector<zero::OffloadTarget> optim_options = {{Tier::device, 1.0}};
  for (Tier t : {Tier::host, Tier::nvme})
    for (double ratio : {0.25, 0.5, 0.75, 1.0}) optim_options.push_back({t, ratio});

  // The request's NVMe chunk, and the smaller one where it is larger (each once).
  std::vector<size_t> chunk_options = {req.base.placement.nvme_chunk_elems};
  if (kSmallNvmeChunk < req.base.placement.nvme_chunk_elems)
    chunk_options.push_back(kSmallNvmeChunk);
  PlanResult result;
  std::vector<Candidate> rejected, fitting;
  // One copy of the request's input and one grouping of its units for every candidate: the
  // fields set below are all that changes.
  EstimateInput in = req.base;
  const std::vector<zero::UnitRun> runs = zero::identical_runs(in.units);
  for (int stage = 0; stage <= 3; ++stage)
    for (const zero::OffloadTarget& param : param_options)
      for (const zero::OffloadTarget& optim : optim_options)
        for (Tier grads : {Tier::host, Tier::nvme})
          for (size_t chunk : chunk_options)
            // No recompute; selective; full with the checkpoints on device, host, nvme (only full
            // recompute keeps checkpoints, so only it places them off the device).
            for (int ck = 0; ck < 5; ++ck)
              for (size_t b = 1; b <= per_rank_batch; b *= 2)
                for (size_t max_live : {req.base.max_live_parameters, size_t{0}}) {
                  const RecomputeMode mode = ck == 0   ? RecomputeMode::none
                                             : ck == 1 ? RecomputeMode::selective
                                                       : RecomputeMode::full;
                  const bool ckpt = mode == RecomputeMode::full;
                  const Tier ckpt_tier = ck > 2 ? static_cast<Tier>(ck - 2) : Tier::device;
                  if (req.only_recompute < kNumRecomputeModes &&
                      static_cast<size_t>(mode) != req.only_recompute)
                    continue;
                  // Checkpoints off the device: with a placement function and a budget there.
                  if (ckpt_tier != Tier::device &&
                      (!req.placed_checkpoints || req.budget[static_cast<size_t>(ckpt_tier)] == 0))
                    continue;
                  if (req.only_checkpoint_tier < kNumTiers &&
                      (!ckpt || static_cast<size_t>(ckpt_tier) != req.only_checkpoint_tier))
                    continue;
                  if (param.tier != Tier::device && stage != 3) continue;
                  // Gradient shards go to NVMe only with the optimizer there, at stages 2-3.
                  if (grads == Tier::nvme && (stage < 2 || optim.tier != Tier::nvme)) continue;
                  // The smaller NVMe optimizer chunk (fewer host bytes in its pipeline's slots)
                  // only where the optimizer streams from NVMe.
                  if (chunk != req.base.placement.nvme_chunk_elems && optim.tier != Tier::nvme)
                    continue;
                  if (max_live != req.base.max_live_parameters && stage != 3) continue;
                  // A tier without a budget is not offered (rather than listed as not fitting).
                  if (req.budget[static_cast<size_t>(param.tier)] == 0 ||
                      req.budget[static_cast<size_t>(optim.tier)] == 0)
                    continue;
                  if (optim.tier != Tier::device && stage == 0) continue;
                  Candidate c;
                  c.stage = stage;
                  c.placement = req.base.placement;
                  c.placement.param = param;
                  c.placement.optimizer = optim;
                  c.placement.nvme_grads = grads;
                  c.placement.nvme_chunk_elems = chunk;
                  c.recompute = mode;
                  c.micro_batch = b;
                  c.accumulation = (req.target_global_batch + dp * b - 1) / (dp * b);
                  c.max_live_parameters = max_live;
                  in.max_live_parameters = max_live;
                  in.stage = stage;
                  in.placement = c.placement;
                  c.checkpoint_tier = ckpt_tier;
                  in.checkpoints = {};
                  if (ckpt_tier == Tier::device) {
                    in.activation_bytes = req.activation_bytes(b, mode);
                  } else {
                    const PlanRequest::PlacedActivations placed =
                        req.placed_checkpoints(b, ckpt_tier);
                    in.activation_bytes = placed.activation_bytes;
                    in.checkpoints = placed.checkpoints;
                  }
                  c.estimate_checkpoints = in.checkpoints;
                  c.estimate = estimate(in, runs);
                  c.time = predict_step_time(req, c);
                  c.fits = true;
                  for (size_t t = 0; t < kNumTiers && c.fits; ++t) {
                    const size_t need = c.estimate.tier_total(static_cast<Tier>(t));
                    const double room = static_cast<double>(req.budget[t]) * (1.0 - req.margin);
                    if (need > 0 && static_cast<double>(need) > room) {
                      c.fits = false;
                      c.overflow = static_cast<Tier>(t);
                      c.overflow_bytes = need;
                    }
                  }
                  ++result.considered;
                  if (!c.fits) {
                    rejected.push_back(std::move(c));
                    continue;
                  }
                  ++result.fitting;
                  fitting.push_back(std::move(c));
                }
  // Fastest per token; candidates within kTie of the fastest count as equal (the model is not
  // that precise) and the simplest of them wins: the largest micro-batch (better GEMM efficiency,
  // which the model does not see), the least recompute (none, selective, full), the fewest bytes
  // off the device, the lowest stage.
  constexpr double kTie = 0.01;
  double fastest = 0.0;
  for (const Candidate& c : fitting)
    if (fastest == 0.0 || c.time.per_token_s < fastest) fastest = c.time.per_token_s;
  auto simpler = [](const Candidate& a, const Candidate& b) {
    const size_t a_off = a.estimate.tier_total(Tier::host) + a.estimate.tier_total(Tier::nvme);
    const size_t b_off = b.estimate.tier_total(Tier::host) + b.estimate.tier_total(Tier::nvme);
    return std::make_tuple(-static_cast<int64_t>(a.micro_batch), static_cast<int>(a.recompute),
                           static_cast<int>(a.checkpoint_tier), a_off, a.stage,
                           a.time.per_token_s) <
           std::make_tuple(-static_cast<int64_t>(b.micro_batch), static_cast<int>(b.recompute),
                           static_cast<int>(b.checkpoint_tier), b_off, b.stage, b.time.per_token_s);
  };
  for (Candidate& c : fitting) {
    if (c.time.per_token_s > fastest * (1.0 + kTie)) continue;
    if (!result.found || simpler(c, result.best)) {
      result.best = c;
      result.found = true;
    }
  }
  // Rejected: the fastest few, one per (stage, placement, checkpointing).
  std::sort(rejected.begin(), rejected.end(), [](const Candidate& a, const Candidate& b) {
    // Among equally fast ones, the nearest miss first: it says how much more memory would do.
    return std::make_pair(a.time.per_token_s, a.overflow_bytes) <
           std::make_pair(b.time.per_token_s, b.overflow_bytes);
  });
  std::map<std::tuple<int, int, int, double, int, size_t, bool, size_t, int>, bool> seen;
  for (Candidate& c : rejected) {
    if (result.rejected.size() >= keep_rejected) break;
    auto key =
        std::make_tuple(c.stage, static_cast<int>(c.placement.param.tier),
                        static_cast<int>(c.placement.optimizer.tier), c.placement.optimizer.ratio,
                        static_cast<int>(c.recompute), c.max_live_parameters, c.grads_on_nvme(),
                        c.placement.nvme_chunk_elems, static_cast<int>(c.checkpoint_tier));
    if (seen[key]) continue;
    seen[key] = true;
    result.rejected.push_back(std::move(c));
  }
  return result;
}

}  // namespace tierzero::profile
