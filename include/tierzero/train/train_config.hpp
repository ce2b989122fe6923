// TrainConfig: everything a training run is told (the train layer's own settings; the layers
// below take their own option structs, which the trainer fills from it), parsed from a
// DeepSpeed-style JSON config. DeepSpeed's key names are used for what applies, so an existing
// DeepSpeed config reads unchanged; TierZero's own settings (model shape, data, run length) live
// under "tierzero". Every unknown key, wrong type or out-of-range value is an Error naming the
// key's full path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::train {

// The largest model shape a config (tierzero.model), --model or a model file may give.
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxChannels = int64_t{1} << 20;

struct ModelShape {
  int64_t vocab_size = 257;             // real vocabulary (byte-level tokenizer: 256 bytes + EOT)
  int64_t padded_vocab_size = 0;        // 0: vocab_size rounded up to a multiple of 128
  int64_t classifier_chunk_tokens = 0;  // 0: automatic (GPTConfig::classifier_chunk_tokens)
  int64_t context_length = 64;          // maximum sequence length (positions)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  // GPT-2 (the default) or the Llama family's parts; the model section's keys are Hugging Face
  // config.json's (rms_norm_eps, rope_theta, rope_scaling, intermediate_size,
  // num_key_value_heads, tie_word_embeddings, head_dim, ...), or "architecture": "llama".
  nn::GPTArch arch;
};

// `train --model`: a preset name (gpt2 ... gpt2-xl: its whole shape, 50257 tokens and 1024
// positions; the Llama family's, e.g. llama-3.2-1b or llama-tiny, with their architecture) or a
// custom "layers,heads,channels" (the vocabulary, context and architecture stay as they are).
// Throws Error naming the text when it is neither.
void apply_model_name(const std::string& text, ModelShape& shape);

struct OptimizerConfig {
  std::string type = "AdamW";
  double lr = 3e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to matrices (rank >= 2) only, not to biases or norms
};

struct SchedulerConfig {
  std::string type = "WarmupCosineLR";  // WarmupLR, WarmupDecayLR, WarmupCosineLR, or "none"
  int64_t warmup_num_steps = 20;
  int64_t total_num_steps = 0;         // 0: the run's step count
  std::string warmup_type = "linear";  // linear or log
  double warmup_min_ratio = 0.0;       // WarmupCosineLR
  double cos_min_ratio = 0.1;          // WarmupCosineLR
  double warmup_min_lr = 0.0;          // WarmupLR / WarmupDecayLR
  double warmup_max_lr = -1.0;         // WarmupLR / WarmupDecayLR; < 0: optimizer lr
};

struct OffloadConfig {
  std::string device = "none";  // none, cpu, nvme
  std::string nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100000000;  // elements, as in DeepSpeed
  double ratio = 1.0;               // fraction of units offloaded (the first ones)
};

// offload_optimizer's defaults differ from offload_param's only in buffer_count (DeepSpeed's 4).
inline OffloadConfig optimizer_offload_defaults() {
  OffloadConfig o;
  o.buffer_count = 4;
  return o;
}

// tierzero.activation_checkpoints (train --activation-offload, --activation-nvme-path): the tier
// the block checkpoints live on between the forward and the backward when activation
// checkpointing is on. "device" keeps them in device memory (as without this section); "cpu"
// (or "host") moves them to pinned host memory under host_memory_budget_gb, "nvme" to swap files
// in nvme_path (checksummed). buffer_count: device slots a checkpoint is written from and read
// back into ahead of the backward (at least 2; the prefetch's budget in checkpoints).
struct ActivationCheckpointPlacement {
  std::string device = "device";  // device, cpu (= host), nvme
  std::string nvme_path;
  int64_t buffer_count = 3;
};

struct ZeroConfig {
  int64_t stage = 0;
  OffloadConfig offload_param;
  OffloadConfig offload_optimizer = optimizer_offload_defaults();
  bool overlap_comm = true;
  int64_t reduce_bucket_size = 500000000;
  // Stages 1-2: elements of updated parameters all-gathered at once after the step.
  int64_t allgather_bucket_size = 500000000;
  int64_t prefetch_bucket_size = 50000000;       // stage3_prefetch_bucket_size
  int64_t param_persistence_threshold = 100000;  // stage3_param_persistence_threshold
  int64_t max_live_parameters = 1000000000;      // stage3_max_live_parameters
  int64_t max_reuse_distance = 1000000000;       // stage3_max_reuse_distance
};

struct AioConfig {
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  bool single_submit = false;
};

// DeepSpeed's "activation_checkpointing" section, read so DeepSpeed configs parse and validate.
// In DeepSpeed the model code decides what to checkpoint; here tierzero.activation_checkpointing
// does. partition_activations and cpu_checkpointing = true are refused (not implemented);
// contiguous_memory_optimization (and its number_checkpoints) is what TierZero does anyway (a
// micro-batch's checkpoints are one allocation); synchronize_checkpoint_boundary and profile only
// time or report, and are named in the ignored-keys warning when on.
struct DeepSpeedActivationCheckpointing {
  bool contiguous_memory_optimization = false;
  int64_t number_checkpoints = 0;  // 0: unset (DeepSpeed's null)
};

// fp16's loss scaling (DeepSpeed's "fp16" keys): loss_scale 0 is dynamic, starting at
// 2^initial_scale_power, halved on an overflow once `hysteresis` overflows have been seen, doubled
// after loss_scale_window steps without one, never below min_loss_scale; > 0 is a fixed scale.
struct LossScaleConfig {
  double loss_scale = 0.0;
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  double min_loss_scale = 1.0;
  // DeepSpeed's consecutive_hysteresis: every step without an overflow refills the hysteresis,
  // so only `hysteresis` overflows in a row lower the scale.
  bool consecutive_hysteresis = false;
};

struct TrainConfig {
  // DeepSpeed keys
  int64_t micro_batch_size = 8;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 1;
  int64_t train_batch_size = 0;  // 0: micro * accumulation * data-parallel ranks
  // Whether the config (or the CLI) gave these two: a train_batch_size derives the one not given
  // as DeepSpeed does, once the data-parallel size is known (global_batch.hpp).
  bool micro_batch_given = false;
  bool accumulation_given = false;
  double gradient_clipping = 1.0;  // 0 disables
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  bool bf16 = false;
  bool fp16 = false;
  LossScaleConfig fp16_scaling;
  // The gradient reductions' payload: fp32, or bf16 / fp16 (half the bytes; the mean is
  // accumulated in fp32). Parameter gathers always move the working dtype.
  std::string communication_data_type = "fp32";
  ZeroConfig zero;
  AioConfig aio;
  DeepSpeedActivationCheckpointing ds_activation_checkpointing;  // "activation_checkpointing"
  // DeepSpeed keys that only change what is logged or reported (monitors, profilers, print
  // intervals), set to something other than off, by full path: a run names them in one warning
  // line (ignored_keys_warning(), "" when there are none; rank 0 prints it).
  std::vector<std::string> ignored_keys;
  std::string ignored_keys_warning() const;

  // "tierzero" section
  ModelShape model;
  int64_t seq_len = 64;  // tokens per sequence (T); <= model.context_length
  int64_t steps = 300;
  uint64_t seed = 1337;
  std::string device = "cpu";  // cpu, cuda, cuda:N
  int64_t threads = 0;         // CPU threads; 0: OpenMP default
  std::string train_data;      // glob of llm.c token shards; empty: the built-in corpus
  std::string val_data;        // glob; empty: held-out part of the built-in corpus
  int64_t val_every = 0;       // steps between validation passes; 0: only at the end
  int64_t val_batches = 8;
  std::string load_checkpoint;  // llm.c model checkpoint to start from
  std::string save_checkpoint;  // written at the end of the run
  // Training checkpoints (tierzero.checkpoint; train --save-dir/--save-every/--keep-last/
  // --resume): the whole training state, every rank its own shards (training_checkpoint.hpp).
  struct CheckpointConfig {
    std::string save_dir;    // empty: none written
    int64_t save_every = 0;  // steps between checkpoints (0: only at the end, and on SIGTERM)
    int64_t keep_last = 0;   // step directories kept (0: all)
    std::string resume;      // a checkpoint directory (or its parent with `latest`) to resume
    // On resume the learning-rate schedule's length is the checkpoint's (its scheduler total
    // steps), whatever this run's `steps`; true follows this run's instead (train
    // --reset-lr-schedule).
    bool reset_lr_schedule = false;
  } checkpoint;
  // fp32 runs' products on CUDA in TF32 on the tensor cores (fp32 accumulation): faster, about
  // 3 decimal digits per operand instead of 7. Off by default (fp32 is the exact reference); with
  // bf16 or fp16 working parameters the products use those tensor cores anyway, and the CPU
  // always computes in fp32 (config_bridges.hpp: matmul_precision_for).
  bool tf32 = false;
  // What the products read and write with bf16 or fp16 working parameters: "auto" (16-bit on
  // CUDA where it is built, else fp32), "fp32" (the working copy widened per unit, activations
  // fp32), or the working type, "bf16" / "fp16" (16-bit activations on the tensor cores' native
  // operands). config_bridges.hpp: compute_dtype_for.
  std::string compute_dtype = "auto";
  std::string log_level = "info";
  std::string config_file;  // the file load() read (an input no output may overwrite); "" else
  double device_memory_budget_gb = 0.0;  // 0: the device's total memory
  // Pinned host memory the partition store may hold for offloaded state and staging;
  // 0: 80% of the machine's physical memory.
  double host_memory_budget_gb = 0.0;
  // Where gradient shards live when the optimizer is on NVMe: cpu (pinned host memory) or nvme
  // (streamed in by the update; stages 2-3), so no state needs host memory in proportion to the
  // model.
  std::string offload_gradients = "cpu";
  // When the CPU optimizer (states on the host or NVMe) runs: "plain" updates each unit during
  // the backward as soon as its gradient shard is final, on steps where that gives the reference
  // order's result (no clipping, no fp16 loss scaling), else after the backward (taking each
  // unit's share of the gradient norm during the backward); "speculative" updates during the
  // backward on those steps too, as if clipping did not bind, and undoes and redoes the units
  // where it does (or skips on an fp16 overflow); "off" always after the backward (the
  // reference order). All three give the same bits.
  std::string optimizer_overlap = "plain";
  // Transformer blocks per partition-store unit (the granularity of gathers and reduce-scatters).
  int64_t blocks_per_unit = 1;
  // Keep only each transformer block's input and recompute the block in the backward: less
  // activation memory for one more forward's compute. The same as recompute "full" (kept equal
  // to recompute == "full" after parsing).
  bool activation_checkpointing = false;
  // What a block's backward recomputes (nn::Recompute): "none"; "selective", only the
  // attention's core (its output and softmax statistics, from the kept qkv); "full", the whole
  // block (activation_checkpointing).
  std::string recompute = "none";
  ActivationCheckpointPlacement activation_checkpoints;
  // Megatron tensor parallelism: ranks that split every block's heads and MLP features and the
  // vocabulary (the world is dp x tensor_parallel; consecutive ranks form a tensor-parallel
  // group). 1: none.
  int64_t tensor_parallel = 1;
  // Megatron sequence parallelism on top of it: the residual stream and layernorms hold only a
  // rank's share of the micro-batch's tokens (all-gather / reduce-scatter instead of all-reduce).
  bool sequence_parallel = false;
  // DeepSpeed-Ulysses sequence parallelism: ranks that each hold a slice of every sequence, with
  // an all-to-all around each attention (whole sequences of n_head / ulysses_parallel heads).
  // The world is dp x ulysses_parallel (ZeRO partitions over both); not with tensor_parallel or
  // pipeline_parallel. 1: none.
  int64_t ulysses_parallel = 1;
  // Pipeline parallelism: stages the blocks are cut into (the world is dp x tensor_parallel x
  // pipeline_parallel; a stage's ranks are farthest apart in the mesh). 1: none.
  int64_t pipeline_parallel = 1;
  // gpipe, 1f1b or interleaved; gradient_accumulation_steps is the number of micro-batches per
  // step.
  std::string pipeline_schedule = "1f1b";
  // Model chunks per pipeline rank (the interleaved schedule's virtual stages: rank s runs
  // virtual stages s, s + pipeline_parallel, ...); 1 for gpipe and 1f1b.
  int64_t pipeline_virtual_stages = 1;
  // Transformer blocks per virtual stage (pipeline_parallel x pipeline_virtual_stages entries
  // summing to n_layer, in virtual-stage order); empty: balanced by parameters.
  std::vector<int64_t> pipeline_stages;
  // Post each pipeline receive ahead, before the action in front of it computes, when its buffer
  // is free (MPI backend; NCCL always receives at the action). Off: receive at the action.
  bool pipeline_receive_ahead = false;

  // The defaults, as a config file would state them (validated like any file).
  static TrainConfig defaults();
  // Parses JSON text; `source` names it in errors.
  static TrainConfig parse(const std::string& json_text, const std::string& source);
  static TrainConfig load(const std::string& path);  // throws Error if unreadable
};

}  // namespace tierzero::train
