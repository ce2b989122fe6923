// What `tierzero estimate` and `tierzero plan` share: the model and world-layout flags, and the
// GPT-specific inputs of the estimator (its units and its activation bytes) that the profile layer
// may not compute itself because it knows nothing of GPT.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::cli {

struct ModelFlags {
  std::string model;   // preset name; empty: the config's model, else gpt2
  int64_t layers = 0;  // shape flags override the preset's (0: keep)
  int64_t heads = 0;
  int64_t channels = 0;
  int64_t vocab = 0;
  int64_t context = 0;
};

struct WorldFlags {
  int64_t ranks = 0;               // 0: dp * tp * pp * sp
  int64_t dp = 0;                  // 0: ranks / (tp * pp * sp)
  int64_t tp = 0;                  // 0: the config's tierzero.tensor_parallel, else 1
  int64_t pp = 0;                  // 0: the config's tierzero.pipeline_parallel, else 1
  int64_t sp = 0;                  // Ulysses; 0: the config's tierzero.ulysses_parallel, else 1
  bool sequence_parallel = false;  // Megatron's, over the tp ranks (or the config's)
};

void add_model_options(CLI::App& app, ModelFlags& f);
void add_world_options(CLI::App& app, WorldFlags& f);

// The model: --model's preset (or the config's shape when a config is given and no --model,
// else gpt2), with any shape flag replacing its part.
nn::GPTConfig resolve_model(const ModelFlags& f, const train::TrainConfig* config);
// Throws Error when the parts do not multiply to --ranks. tp: --tp, else the config's
// tierzero.tensor_parallel when a config is given, else 1.
profile::WorldLayout resolve_world(const WorldFlags& f, const train::TrainConfig* config = nullptr);

// Pinned bounce buffers of one NVMe engine built from the aio section (queue_depth x block_size).
size_t nvme_bounce_bytes(const train::AioConfig& aio);

// The pipeline settings that decide a rank's share: the schedule, micro-batches per step (0: pp,
// from which on 1F1B's bound no longer grows), model chunks per rank (the interleaved schedule's
// virtual stages) and the cut (blocks per virtual stage; empty: balanced).
struct PipelineFlags {
  std::string schedule = "1f1b";
  size_t micro_batches = 0;
  size_t virtual_stages = 1;
  std::vector<size_t> blocks_per_stage;
};

// The GPT's units as the partition store of one rank sees them: its real per-rank layout
// (local shapes, replicated tensors whole, alignment padding) for its tensor-parallel rank and
// pipeline chunks; with pp > 1 the rank holding the most elements (the blocks balanced as the
// trainer cuts them, or as listed; the last stage counts its tied copy of the embeddings).
std::vector<zero::UnitSpec> model_units(const nn::GPTConfig& config, size_t blocks_per_unit = 1,
                                        size_t tp = 1, size_t pp = 1,
                                        const PipelineFlags& pipeline = {});

// Device activation bytes per rank for micro-batch B and sequence T: T / sp tokens per sequence
// (Ulysses: the attention's insides whole sequences of NH / sp heads),
// the tensor-parallel rank's extents (heads, MLP features and vocabulary over tp; with Megatron
// sequence parallelism the residual stream too) and, with pp > 1, each of the rank's chunks'
// blocks times the micro-batches its schedule keeps in flight there, plus each chunk's scratch
// (what the trainer's executor allocates), for the rank where that is largest.
size_t activation_bytes(const nn::GPTConfig& config, size_t B, size_t T, bool checkpointing,
                        const profile::WorldLayout& world, bool sequence_parallel = false,
                        const PipelineFlags& pipeline = {});
// The same with the block checkpoints on `tier` (tierzero.activation_checkpoints): the
// micro-batches' bytes without them, and the checkpoints' placement for the estimator, for the
// rank where the device bytes are largest.
train::ActivationEstimate activation_estimate_for(const nn::GPTConfig& config, size_t B, size_t T,
                                                  bool checkpointing,
                                                  const profile::WorldLayout& world,
                                                  bool sequence_parallel,
                                                  const PipelineFlags& pipeline, Tier tier,
                                                  size_t device_slots);

// Bytes one rank sends in its tensor-parallel collectives per training micro-batch on ring
// algorithms: the model's analytic payload (nn::expected_tensor_parallel_traffic), an all-reduce
// costing 2 (tp - 1) / tp of its buffer and an all-gather or reduce-scatter (tp - 1) / tp.
double tensor_parallel_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T,
                                  bool checkpointing, const profile::WorldLayout& world,
                                  bool sequence_parallel);

// Bytes one rank sends in its Ulysses all-to-alls per training micro-batch: the analytic payload
// (nn::expected_ulysses_traffic) less the block each all-to-all keeps, (sp - 1) / sp of it.
double ulysses_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T, bool checkpointing,
                          const profile::WorldLayout& world);

// The run settings both commands take, on top of a TrainConfig (--config, or the defaults).
struct RunFlags {
  std::string config;         // DeepSpeed-style JSON (TrainConfig::load); flags below override it
  int64_t stage = -1;         // -1: the config's
  std::string offload_param;  // none, cpu, nvme; empty: the config's
  double offload_param_ratio = -1.0;      // < 0: 1
  std::string offload_optimizer;          // none, cpu, nvme; empty: the config's
  double offload_optimizer_ratio = -1.0;  // < 0: the config's
  int64_t micro_batch = 0;                // 0: the config's train_micro_batch_size_per_gpu
  int64_t seq = 0;             // 0: the config's seq_len, or the model's context without a config
  bool checkpointing = false;  // or the config's tierzero.activation_checkpointing
  // device, host (cpu) or nvme: tierzero.activation_checkpoints.device; empty: the config's.
  std::string activation_offload;
};
void add_run_options(CLI::App& app, RunFlags& f);

struct EstimateSettings {
  train::TrainConfig config;  // loaded or defaults, with the flags applied
  nn::GPTConfig model;
  profile::EstimateInput input;    // activation bytes filled in
  bool sequence_parallel = false;  // Megatron's, from the flag or the config
  size_t micro_batch = 1;
  size_t seq_len = 1;
  bool checkpointing = false;
  std::string param_desc;  // "none", "cpu (ratio 1)", ...
  std::string optimizer_desc;
};
EstimateSettings resolve_settings(const ModelFlags& model, const WorldFlags& world,
                                  const RunFlags& run);

}  // namespace tierzero::cli
