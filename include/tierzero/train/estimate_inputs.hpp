// The estimator's GPT-specific inputs: the units one rank's partition store holds and its device
// activation bytes, which the profile layer may not compute itself because it knows nothing of
// GPT. `tierzero estimate` and `plan` (for the rank that must fit) and the trainer's profile
// recorder (for its own rank) take them from here, so a prediction before a run and the one a
// run reports beside its measurements are the same arithmetic.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/profile/planner.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/zero/partition.hpp"

namespace tierzero::train {

// The pipeline settings that decide a rank's share: the schedule, micro-batches per step (0: pp,
// from which on 1F1B's bound no longer grows), model chunks per rank (the interleaved schedule's
// virtual stages) and the cut (blocks per virtual stage; empty: balanced).
struct PipelineShape {
  std::string schedule = "1f1b";
  size_t micro_batches = 0;
  size_t virtual_stages = 1;
  std::vector<size_t> blocks_per_stage;
};

// The config's pipeline for `pp` stages: its schedule, micro-batches, chunks and cut when `pp` is
// the config's pipeline_parallel; for another pp one chunk per rank, balanced (interleaved
// becomes 1f1b).
PipelineShape pipeline_shape_from(const TrainConfig& config, int pp);

// The GPT's units as the partition store of one rank sees them: its real per-rank layout
// (local shapes, replicated tensors whole, alignment padding) for its tensor-parallel rank and
// pipeline chunks; with pp > 1 the rank holding the most elements (the blocks balanced as the
// trainer cuts them, or as listed; the last stage counts its tied copy of the embeddings).
std::vector<zero::UnitSpec> model_units(const nn::GPTConfig& config, size_t blocks_per_unit = 1,
                                        size_t tp = 1, size_t pp = 1,
                                        const PipelineShape& pipeline = {});

// Device activation bytes of one rank running `chunks` (its model chunks; ignored at pp 1) for
// micro-batch B and sequence T: T / sp tokens per sequence (Ulysses: the attention's insides
// whole sequences of NH / sp heads), the tensor-parallel rank's extents (heads, MLP features and
// vocabulary over tp; with Megatron sequence parallelism the residual stream too) and, with
// pp > 1, each chunk's blocks times the micro-batches `schedule` keeps in flight there over
// `micro_batches` per step, plus the chunks' scratch (what the trainer's executor allocates).
// compute: the dtype of the products' activations (compute_dtype_for).
size_t rank_activation_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                             nn::Recompute checkpointing, const profile::WorldLayout& world,
                             bool sequence_parallel, const std::vector<nn::PipelineStage>& chunks,
                             const std::string& schedule, size_t micro_batches,
                             DType compute = DType::f32);

// rank_activation_bytes for the rank where it is largest (pp > 1: every rank's chunks of the cut).
size_t activation_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                        nn::Recompute checkpointing, const profile::WorldLayout& world,
                        bool sequence_parallel = false, const PipelineShape& pipeline = {},
                        DType compute = DType::f32);

// activation_bytes with the block checkpoints on `tier` (tierzero.activation_checkpoints): the
// micro-batches' bytes without them, and the checkpoints' placement for the estimator, for the
// rank where the device bytes are largest.
ActivationEstimate activation_estimate_for(const nn::GPTConfig& config, size_t B, size_t T,
                                           nn::Recompute recompute,
                                           const profile::WorldLayout& world,
                                           bool sequence_parallel, const PipelineShape& pipeline,
                                           Tier tier, size_t device_slots,
                                           DType compute = DType::f32);

// Bytes one rank sends in its tensor-parallel collectives per training micro-batch on ring
// algorithms: the model's analytic payload (nn::expected_tensor_parallel_traffic), an all-reduce
// costing 2 (tp - 1) / tp of its buffer and an all-gather or reduce-scatter (tp - 1) / tp.
// Selective recompute runs no collective again (it rebuilds the attention's core from the kept
// qkv); full recompute runs the block's again.
// compute: the run's compute dtype (16-bit compute gathers 16-bit tensors under sequence
// parallelism).
double tensor_parallel_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                                  nn::Recompute recompute, const profile::WorldLayout& world,
                                  bool sequence_parallel, DType compute);

// Bytes one rank sends in its Ulysses all-to-alls per training micro-batch: the analytic payload
// (nn::expected_ulysses_traffic) less the block each all-to-all keeps, (sp - 1) / sp of it.
double ulysses_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T, nn::Recompute recompute,
                          const profile::WorldLayout& world, DType compute);

// The model's recompute mode for the planner's (profile::RecomputeMode names nn::Recompute's).
nn::Recompute recompute_of(profile::RecomputeMode mode);

// What a run of `config` on `world` holds per rank, for the rank that must fit: the units and
// activations above (the config's pipeline for world.pp), with the config's placement and
// settings (estimate_input_from). B, T and the switches are the run's (flags may override the
// config's).
profile::EstimateInput run_estimate_input(const TrainConfig& config, const nn::GPTConfig& model,
                                          const profile::WorldLayout& world, size_t B, size_t T,
                                          nn::Recompute checkpointing, bool sequence_parallel);

}  // namespace tierzero::train
