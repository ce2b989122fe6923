// What `tierzero estimate` and `tierzero plan` share: the model, world-layout and run flags, and
// the settings they resolve to. The estimator's GPT-specific inputs (units, activation bytes) and
// the config's placement come from train (estimate_inputs.hpp, placement_from_config.hpp), where
// the trainer takes them too.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/train/activation_estimate.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::cli {

struct ModelFlags {
  std::string model;      // preset name; empty: the config's model, else gpt2
  std::string hf_config;  // a Hugging Face config.json (or its directory) instead of a preset
  int64_t layers = 0;     // shape flags override the preset's (0: keep)
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

// The run settings both commands take, on top of a TrainConfig (--config, or the defaults).
struct RunFlags {
  std::string config;         // DeepSpeed-style JSON (TrainConfig::load); flags below override it
  int64_t stage = -1;         // -1: the config's
  std::string offload_param;  // none, cpu, nvme; empty: the config's
  double offload_param_ratio = -1.0;      // < 0: the config's
  std::string offload_optimizer;          // none, cpu, nvme; empty: the config's
  double offload_optimizer_ratio = -1.0;  // < 0: the config's
  int64_t micro_batch = 0;                // 0: the config's train_micro_batch_size_per_gpu
  int64_t seq = 0;             // 0: the config's seq_len, or the model's context without a config
  bool checkpointing = false;  // or the config's tierzero.activation_checkpointing
  std::string recompute;       // none, selective, full; empty: --checkpointing, or the config's
  // device, host (cpu) or nvme: tierzero.activation_checkpoints.device; empty: the config's.
  std::string activation_offload;
  std::string precision;  // the working parameters' type, fp32, bf16 or fp16; empty: the config's
  std::string device;     // cpu, cuda or cuda:N (the compute dtype follows it); empty: the config's
};
void add_run_options(CLI::App& app, RunFlags& f);

struct EstimateSettings {
  train::TrainConfig config;  // loaded or defaults, with the flags applied
  nn::GPTConfig model;
  profile::EstimateInput input;    // train::run_estimate_input: the rank that must fit
  bool sequence_parallel = false;  // Megatron's, from the flag or the config
  size_t micro_batch = 1;
  size_t seq_len = 1;
  bool checkpointing = false;  // recompute is full
  nn::Recompute recompute;
  std::string param_desc;  // "none", "cpu (ratio 1)", ...
  std::string optimizer_desc;
};
EstimateSettings resolve_settings(const ModelFlags& model, const WorldFlags& world,
                                  const RunFlags& run);

}  // namespace tierzero::cli
