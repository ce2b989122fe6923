// The estimator's GPT-specific inputs: units and activation bytes (see estimate_inputs.hpp).
#include "tierzero/train/estimate_inputs.hpp"

#include <algorithm>
#include <utility>

#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/pp/pipeline_cut.hpp"
#include "tierzero/nn/pp/pipeline_schedule.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"
#include "tierzero/nn/tp/tensor_parallel_group.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/pipeline_executor.hpp"
#include "tierzero/train/store_provider.hpp"

namespace tierzero::train {

PipelineShape pipeline_shape_from(const TrainConfig& c, int pp) {
  PipelineShape pipeline;
  pipeline.schedule = c.pipeline_schedule;
  pipeline.micro_batches = static_cast<size_t>(c.gradient_accumulation_steps);
  if (pp == c.pipeline_parallel) {  // the config's pipeline: its chunks and its cut
    pipeline.virtual_stages = static_cast<size_t>(c.pipeline_virtual_stages);
    for (int64_t b : c.pipeline_stages) pipeline.blocks_per_stage.push_back(static_cast<size_t>(b));
  } else if (pipeline.schedule == "interleaved") {
    pipeline.schedule = "1f1b";  // a pp other than the config's: one chunk per rank
  }
  return pipeline;
}

namespace {

// The chunks of every pipeline rank: rank r runs virtual stages r, r + pp, ... of the
// pp * virtual_stages cut.
std::vector<std::vector<nn::PipelineStage>> rank_chunks(const nn::GPTConfig& config, size_t pp,
                                                        size_t virtual_stages,
                                                        const std::vector<size_t>& blocks) {
  const std::vector<nn::PipelineStage> all =
      nn::partition_pipeline(config, pp * virtual_stages, blocks);
  std::vector<std::vector<nn::PipelineStage>> ranks;
  for (size_t r = 0; r < pp; ++r) ranks.push_back(nn::rank_chunks(all, pp, r));
  return ranks;
}

}  // namespace

std::vector<zero::UnitSpec> model_units(const nn::GPTConfig& config, size_t blocks_per_unit,
                                        size_t tp, size_t pp, const PipelineShape& pipeline) {
  // The rank with the most elements is the one that must fit.
  std::vector<zero::UnitSpec> worst;
  size_t worst_elems = 0;
  for (const std::vector<nn::PipelineStage>& chunks :
       rank_chunks(config, pp, pipeline.virtual_stages, pipeline.blocks_per_stage)) {
    std::vector<zero::UnitSpec> units = units_from_layout(
        nn::chunks_param_layout(config, chunks, nn::TensorParallel{tp, 0}), blocks_per_unit);
    size_t elems = 0;
    for (const zero::UnitSpec& u : units) elems += u.numel;
    if (worst.empty() || elems > worst_elems) {
      worst = std::move(units);
      worst_elems = elems;
    }
  }
  return worst;
}

size_t rank_activation_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                             nn::Recompute checkpointing, const profile::WorldLayout& world,
                             bool sequence_parallel, const std::vector<nn::PipelineStage>& chunks,
                             const std::string& schedule, size_t micro_batches, DType compute) {
  const auto tp = static_cast<size_t>(world.tp), sp = static_cast<size_t>(world.sp);
  if (world.pp == 1)
    return nn::GPT::activation_bytes_for(config, B, T, checkpointing, tp, sequence_parallel, sp,
                                         compute);
  // The rank holds its chunks' activations for as many micro-batches as the schedule keeps in
  // flight there.
  return PipelineExecutor::activation_bytes_for(
      config, nn::ActivationDims::of(config, B, T, tp, sequence_parallel, sp, compute), chunks,
      nn::pipeline_schedule_from_name(schedule), micro_batches, checkpointing);
}

size_t activation_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                        nn::Recompute checkpointing, const profile::WorldLayout& world,
                        bool sequence_parallel, const PipelineShape& pipeline, DType compute) {
  const auto pp = static_cast<size_t>(world.pp);
  if (pp == 1)
    return rank_activation_bytes(config, B, T, checkpointing, world, sequence_parallel, {},
                                 pipeline.schedule, 1, compute);
  // The largest is the rank that must fit.
  const size_t m = pipeline.micro_batches > 0 ? pipeline.micro_batches : pp;
  size_t worst = 0;
  for (const std::vector<nn::PipelineStage>& chunks :
       rank_chunks(config, pp, pipeline.virtual_stages, pipeline.blocks_per_stage))
    worst =
        std::max(worst, rank_activation_bytes(config, B, T, checkpointing, world, sequence_parallel,
                                              chunks, pipeline.schedule, m, compute));
  return worst;
}

ActivationEstimate activation_estimate_for(const nn::GPTConfig& config, size_t B, size_t T,
                                           nn::Recompute recompute,
                                           const profile::WorldLayout& world,
                                           bool sequence_parallel, const PipelineShape& pipeline,
                                           Tier tier, size_t device_slots, DType compute) {
  const auto pp = static_cast<size_t>(world.pp), sp = static_cast<size_t>(world.sp);
  const auto tp = static_cast<size_t>(world.tp);
  const nn::ActivationDims dims =
      nn::ActivationDims::of(config, B, T, tp, sequence_parallel, sp, compute);
  const nn::PipelineSchedule schedule = nn::pipeline_schedule_from_name(pipeline.schedule);
  if (pp == 1)
    return activation_estimate(config, dims, {}, schedule, 1, recompute, tier, device_slots);
  // Each rank holds its chunks' activations for as many micro-batches as the schedule keeps in
  // flight there; the largest is the rank that must fit.
  const size_t m = pipeline.micro_batches > 0 ? pipeline.micro_batches : pp;
  ActivationEstimate worst;
  size_t worst_device = 0, stored_most = 0;
  for (const std::vector<nn::PipelineStage>& chunks :
       rank_chunks(config, pp, pipeline.virtual_stages, pipeline.blocks_per_stage)) {
    const ActivationEstimate a =
        activation_estimate(config, dims, chunks, schedule, m, recompute, tier, device_slots);
    profile::TierBytes extra;
    profile::add_checkpoint_bytes(a.checkpoints, extra);
    // The rank with the most device bytes; among equals, the one storing the most checkpoints.
    stored_most = std::max(stored_most, a.checkpoints.stored);
    const size_t device = a.activation_bytes + extra.tier_total(Tier::device);
    if (device > worst_device ||
        (device == worst_device && a.checkpoints.stored >= worst.checkpoints.stored)) {
      worst_device = device;
      worst = a;
    }
  }
  worst.checkpoints.stored_most = stored_most;
  return worst;
}

double tensor_parallel_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                                  nn::Recompute recompute, const profile::WorldLayout& world,
                                  bool sequence_parallel, DType compute) {
  const auto tp = static_cast<size_t>(world.tp);
  if (tp == 1) return 0.0;
  const auto pp = static_cast<size_t>(world.pp);
  const size_t layers = (config.num_layers + pp - 1) / pp;
  const nn::TensorParallelTraffic t = nn::expected_tensor_parallel_traffic(
      layers, nn::ActivationDims::of(config, B, T, tp, sequence_parallel, 1, compute),
      recompute.is_full());
  const double ring = static_cast<double>(tp - 1) / static_cast<double>(tp);
  return ring * (2.0 * static_cast<double>(t.all_reduce_bytes) +
                 static_cast<double>(t.all_gather_bytes + t.reduce_scatter_bytes));
}

double ulysses_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T, nn::Recompute recompute,
                          const profile::WorldLayout& world, DType compute) {
  const auto sp = static_cast<size_t>(world.sp);
  if (sp == 1) return 0.0;
  const nn::UlyssesTraffic t = nn::expected_ulysses_traffic(
      config.num_layers,
      nn::ActivationDims::of(config, B, T, static_cast<size_t>(world.tp), false, sp, compute),
      recompute);
  // Each all-to-all keeps one of its sp blocks on the rank.
  return static_cast<double>(t.all_to_all_bytes) * static_cast<double>(sp - 1) /
         static_cast<double>(sp);
}

nn::Recompute recompute_of(profile::RecomputeMode mode) {
  return mode == profile::RecomputeMode::none        ? nn::Recompute(nn::Recompute::none)
         : mode == profile::RecomputeMode::selective ? nn::Recompute(nn::Recompute::selective)
                                                     : nn::Recompute(nn::Recompute::full);
}

profile::EstimateInput run_estimate_input(const TrainConfig& c, const nn::GPTConfig& model,
                                          const profile::WorldLayout& world, size_t B, size_t T,
                                          nn::Recompute checkpointing, bool sequence_parallel) {
  const PipelineShape pipeline = pipeline_shape_from(c, world.pp);
  const std::vector<zero::UnitSpec> units =
      model_units(model, static_cast<size_t>(c.blocks_per_unit), static_cast<size_t>(world.tp),
                  static_cast<size_t>(world.pp), pipeline);
  const Tier tier = checkpoint_tier_of(c.activation_checkpoints);
  // The dtype the run would compute in on the config's device.
  const DType compute = compute_dtype_for(c, device_kind_of(c.device));
  if (!checkpointing.is_full() || tier == Tier::device) {
    profile::EstimateInput input = estimate_input_from(
        c, units, world,
        activation_bytes(model, B, T, checkpointing, world, sequence_parallel, pipeline, compute));
    input.compute = compute;
    return input;
  }
  // The block checkpoints on the host or NVMe: the micro-batches hold none of them.
  const ActivationEstimate a =
      activation_estimate_for(model, B, T, checkpointing, world, sequence_parallel, pipeline, tier,
                              static_cast<size_t>(c.activation_checkpoints.buffer_count), compute);
  profile::EstimateInput input = estimate_input_from(c, units, world, a.activation_bytes);
  input.checkpoints = a.checkpoints;
  input.compute = compute;
  return input;
}

}  // namespace tierzero::train
