// Parsing and validation of TrainConfig. Each section is read by one function with a
// ConfigReader, which rejects unknown keys; cross-field rules are checked at the end. A DeepSpeed
// key either does what it says, or reads only at the value TierZero implements (refused by name
// otherwise), or, when it only logs or reports, is named in one warning line.
#include "tierzero/train/train_config.hpp"

#include <cinttypes>
#include <cstdio>
#include <limits>

#include "tierzero/core/config_reader.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/train/config_bridges.hpp"

namespace tierzero::train {

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// DeepSpeed keys without a counterpart in TierZero are read at the value that states what
// TierZero does (or DeepSpeed's default, where TierZero does that too); any other value is
// refused, naming the key, why, and what to use instead. None is read and then ignored.
void only_bool(ConfigReader& r, const std::string& key, bool supported, const std::string& why) {
  if (r.get_bool(key, supported) != supported)
    r.fail(key, std::string("= ") + (supported ? "false" : "true") + " is not supported: " + why);
}

void only_number(ConfigReader& r, const std::string& key, double supported,
                 const std::string& why) {
  const double v = r.get_number(key, supported);
  if (v != supported) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    r.fail(key, std::string("= ") + buf + " is not supported: " + why);
  }
}

// A key that only changes what DeepSpeed logs, times or reports: noted in `ignored` (by full
// path) when it is on, i.e. anything but absent, null, false or an object whose "enabled" is not
// true. steps_per_print-like numbers count as on.
void cosmetic(ConfigReader& r, const std::string& key, std::vector<std::string>& ignored) {
  const nlohmann::json* v = r.get_json(key);
  if (v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>())) return;
  if (v->is_object()) {
    const auto e = v->find("enabled");
    if (e == v->end() || !e->is_boolean() || !e->get<bool>()) return;
  }
  ignored.push_back(r.key_path(key));
}

void read_optimizer(ConfigReader r, OptimizerConfig& o) {
  o.type = r.get_string("type", o.type, {"AdamW", "Adam", "adamw", "adam"});
  if (o.type == "adamw") o.type = "AdamW";
  if (o.type == "adam") o.type = "Adam";
  ConfigReader p = r.child("params");
  o.lr = p.get_number("lr", o.lr, 0.0, 10.0);
  auto betas = p.get_numbers("betas", {o.beta1, o.beta2}, 2, 0.0, 0.999999);
  o.beta1 = betas[0];
  o.beta2 = betas[1];
  o.eps = p.get_number("eps", o.eps, 0.0, 1.0, true);
  o.weight_decay = p.get_number("weight_decay", o.weight_decay, 0.0, 10.0);
  // DeepSpeed's Adam is AdamW unless adam_w_mode is false; TierZero only does decoupled decay.
  if (!p.get_bool("adam_w_mode", true))
    p.fail("adam_w_mode", "= false (L2-coupled Adam) is not supported; TierZero runs AdamW");
  if (p.get_bool("amsgrad", false)) p.fail("amsgrad", "= true is not supported");
  if (!p.get_bool("bias_correction", true)) p.fail("bias_correction", "= false is not supported");
  p.accept({"torch_adam", "fused"});
  p.finish();
  r.finish();
}

// A DeepSpeed scheduler's parameters belong to its type: WarmupLR and WarmupDecayLR go from
// warmup_min_lr to warmup_max_lr, WarmupCosineLR scales the optimizer's lr by ratios. A key of
// the other kind would be read and never used, so it is refused by name.
void check_scheduler_keys(const ConfigReader& p, const std::string& type) {
  const bool cosine = type == "WarmupCosineLR";
  const std::vector<std::string> foreign =
      cosine ? std::vector<std::string>{"warmup_min_lr", "warmup_max_lr"}
             : std::vector<std::string>{"warmup_min_ratio", "cos_min_ratio"};
  for (const std::string& key : foreign)
    if (p.has(key))
      p.fail(key, "is not a parameter of scheduler " + type + " (it belongs to " +
                      (cosine ? "WarmupLR and WarmupDecayLR" : "WarmupCosineLR") + ")");
  if (type == "WarmupLR" && p.has("total_num_steps"))
    p.fail("total_num_steps",
           "is not a parameter of WarmupLR, which holds its peak once warm "
           "(WarmupDecayLR and WarmupCosineLR decay over it)");
}

void read_scheduler(ConfigReader r, SchedulerConfig& s) {
  s.type = r.get_string("type", s.type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "none"});
  ConfigReader p = r.child("params");
  check_scheduler_keys(p, s.type);
  s.warmup_num_steps = p.get_int("warmup_num_steps", s.warmup_num_steps, 0, kMaxInt);
  s.total_num_steps = p.get_int("total_num_steps", s.total_num_steps, 0, kMaxInt);
  s.warmup_type = p.get_string("warmup_type", s.warmup_type, {"linear", "log"});
  s.warmup_min_ratio = p.get_number("warmup_min_ratio", s.warmup_min_ratio, 0.0, 1.0);
  s.cos_min_ratio = p.get_number("cos_min_ratio", s.cos_min_ratio, 0.0, 1.0);
  s.warmup_min_lr = p.get_number("warmup_min_lr", s.warmup_min_lr, 0.0, 10.0);
  s.warmup_max_lr = p.get_number("warmup_max_lr", s.warmup_max_lr, 0.0, 10.0);
  if (s.warmup_max_lr >= 0.0 && s.warmup_min_lr > s.warmup_max_lr)
    p.fail("warmup_min_lr", "= " + std::to_string(s.warmup_min_lr) +
                                " is above warmup_max_lr = " + std::to_string(s.warmup_max_lr) +
                                ": the warmup would lower the lr");
  if (s.type == "WarmupDecayLR" && s.total_num_steps != 0 && s.total_num_steps < s.warmup_num_steps)
    p.fail("total_num_steps", "= " + std::to_string(s.total_num_steps) +
                                  " is below warmup_num_steps = " +
                                  std::to_string(s.warmup_num_steps) + ": the decay never starts");
  if (!p.is_null("last_batch_iteration"))
    only_number(p, "last_batch_iteration", -1.0,
                "the schedule starts at step 0, or where a resumed training checkpoint left it "
                "(tierzero.checkpoint.resume)");
  p.accept({"last_batch_iteration"});
  p.finish();
  r.finish();
}

void read_offload(ConfigReader r, OffloadConfig& o, bool optimizer) {
  o.device = r.get_string("device", o.device, {"none", "cpu", "nvme"});
  o.nvme_path = r.get_string("nvme_path", o.nvme_path);
  only_bool(r, "pin_memory", true,
            "TierZero's host tier is always pinned memory (bound it with "
            "tierzero.host_memory_budget_gb)");
  o.buffer_count = r.get_int("buffer_count", o.buffer_count, 1, 1024);
  // DeepSpeed has ratio for the optimizer only; TierZero also offloads a fraction of the units'
  // parameters with it.
  o.ratio = r.get_number("ratio", o.ratio, 0.0, 1.0);
  if (optimizer) {
    o.buffer_size = r.get_int("buffer_size", o.buffer_size, 1, kMaxInt);
    only_bool(r, "fast_init", false,
              "TierZero writes the initial NVMe optimizer state through its own pipeline");
    // The NVMe optimizer always overlaps its reads and writes with the update (buffer_count
    // slots): either value of these reads, as a request TierZero meets.
    r.get_bool("pipeline_read", true);
    r.get_bool("pipeline_write", true);
    r.get_bool("pipeline", true);
  } else {
    only_number(r, "buffer_size", 1.0e8,
                "TierZero stages whole parameter shards, one unit each (tierzero.blocks_per_unit "
                "sets a unit's size; buffer_count how many are staged)");
    only_number(r, "max_in_cpu", 1.0e9,
                "the pinned host memory TierZero uses is bounded by "
                "tierzero.host_memory_budget_gb");
  }
  if (o.device == "nvme" && o.nvme_path.empty())
    r.fail("device", "= \"nvme\" needs nvme_path (a directory on the drive to swap to)");
  r.finish();
}

void read_zero(ConfigReader r, ZeroConfig& z) {
  z.stage = r.get_int("stage", z.stage, 0, 3);
  ConfigReader param = r.child("offload_param");
  const bool param_device_set = param.has("device");
  read_offload(param, z.offload_param, false);
  ConfigReader optimizer = r.child("offload_optimizer");
  const bool optimizer_device_set = optimizer.has("device");
  read_offload(optimizer, z.offload_optimizer, true);
  // DeepSpeed's legacy switches: cpu_offload is offload_optimizer.device "cpu", cpu_offload_params
  // offload_param.device "cpu".
  if (r.get_bool("cpu_offload", false)) {
    if (optimizer_device_set && z.offload_optimizer.device != "cpu")
      r.fail("cpu_offload", "= true contradicts offload_optimizer.device = \"" +
                                z.offload_optimizer.device + "\"; keep one of the two");
    z.offload_optimizer.device = "cpu";
  }
  if (r.get_bool("cpu_offload_params", false)) {
    if (param_device_set && z.offload_param.device != "cpu")
      r.fail("cpu_offload_params", "= true contradicts offload_param.device = \"" +
                                       z.offload_param.device + "\"; keep one of the two");
    z.offload_param.device = "cpu";
  }
  only_bool(r, "cpu_offload_use_pin_memory", true,
            "TierZero's host tier is always pinned memory (bound it with "
            "tierzero.host_memory_budget_gb)");
  z.overlap_comm = r.get_bool("overlap_comm", z.overlap_comm);
  only_bool(r, "contiguous_gradients", true,
            "TierZero always accumulates gradients in contiguous per-unit buffers");
  only_bool(r, "reduce_scatter", true,
            "TierZero always averages gradients with one collective per bucket (reduce-scatter "
            "at stages 2-3, all-reduce at 0-1)");
  only_bool(r, "allgather_partitions", true,
            "TierZero shares updated partitions with all-gathers (allgather_bucket_size bounds "
            "them)");
  only_bool(r, "round_robin_gradients", false,
            "TierZero's gradient partitions follow its units, in one fixed order");
  only_number(r, "sub_group_size", 1.0e9,
              "the optimizer steps one partition-store unit at a time (tierzero.blocks_per_unit "
              "sets a unit's size; offload_optimizer.buffer_size the NVMe chunk)");
  only_number(r, "zero_hpz_partition_size", 1.0,
              "ZeRO++ hierarchical partitioning is not implemented: parameters are partitioned "
              "over every data-parallel rank");
  only_bool(r, "zero_quantized_weights", false,
            "ZeRO++ quantized weight gathers are not implemented (gathers move the working "
            "dtype; bf16 or fp16 halve them)");
  only_bool(r, "zero_quantized_nontrainable_weights", false,
            "ZeRO++ weight quantization is not implemented");
  only_bool(r, "zero_quantized_gradients", false,
            "ZeRO++ quantized gradient reduction is not implemented (communication_data_type "
            "says the reduction's dtype)");
  only_bool(r, "load_from_fp32_weights", true,
            "a training checkpoint always restores the fp32 master weights");
  only_bool(r, "memory_efficient_linear", true, "TierZero's linear layers have one implementation");
  only_bool(r, "use_multi_rank_bucket_allreduce", true,
            "TierZero's buckets are reduced by one collective over the whole group");
  // TierZero's --save always writes the gathered model, and its checkpoints reshard to any
  // layout; these read at either value (DeepSpeed's default and what TierZero does).
  r.get_bool("stage3_gather_16bit_weights_on_model_save", false);
  r.get_bool("stage3_gather_fp16_weights_on_model_save", false);
  r.get_bool("elastic_checkpoint", false);
  // Every parameter of the GPT is used, so DeepSpeed's check never fires.
  r.get_bool("ignore_unused_parameters", true);
  z.reduce_bucket_size = r.get_int("reduce_bucket_size", z.reduce_bucket_size, 1, kMaxInt);
  z.allgather_bucket_size = r.get_int("allgather_bucket_size", z.allgather_bucket_size, 1, kMaxInt);
  z.prefetch_bucket_size =
      r.get_int("stage3_prefetch_bucket_size", z.prefetch_bucket_size, 0, kMaxInt);
  z.param_persistence_threshold =
      r.get_int("stage3_param_persistence_threshold", z.param_persistence_threshold, 0, kMaxInt);
  z.max_live_parameters =
      r.get_int("stage3_max_live_parameters", z.max_live_parameters, 0, kMaxInt);
  z.max_reuse_distance = r.get_int("stage3_max_reuse_distance", z.max_reuse_distance, 0, kMaxInt);
  if (z.offload_param.device != "none" && z.stage != 3)
    r.fail("offload_param", "needs stage 3 (parameters are only partitioned in stage 3)");
  r.finish();
}

void read_aio(ConfigReader r, AioConfig& a) {
  a.block_size = r.get_int("block_size", a.block_size, 4096, int64_t{1} << 30);
  if (a.block_size % 4096 != 0) r.fail("block_size", "must be a multiple of 4096 (O_DIRECT)");
  a.queue_depth = r.get_int("queue_depth", a.queue_depth, 1, 4096);
  // thread_count is DeepSpeed's older name for intra_op_parallelism.
  for (const char* key : {"intra_op_parallelism", "thread_count"})
    only_number(r, key, 1.0,
                "TierZero's io_uring engine submits from one thread and keeps queue_depth "
                "requests in flight; raise aio.queue_depth for more parallel I/O");
  a.single_submit = r.get_bool("single_submit", a.single_submit);
  only_bool(r, "overlap_events", true,
            "the io_uring engine always overlaps submission and completion");
  if (r.get_bool("use_gds", false))
    r.fail("use_gds",
           "= true: GPUDirect Storage is not supported; TierZero stages NVMe I/O "
           "through pinned host memory (remove the key or set it false)");
  r.finish();
}

// DeepSpeed's activation_checkpointing section: checkpointing itself is switched on by
// tierzero.activation_checkpointing (in DeepSpeed the model code decides). Partitioned and CPU
// checkpoints are refused; contiguous_memory_optimization is what TierZero does anyway (one
// allocation per micro-batch); the timing and profiling switches go into `ignored`.
void read_activation_checkpointing(ConfigReader r, DeepSpeedActivationCheckpointing& a,
                                   std::vector<std::string>& ignored) {
  if (r.get_bool("partition_activations", false))
    r.fail("partition_activations",
           "= true is not supported: TierZero does not partition activations across "
           "model-parallel ranks (remove the key or set it false; "
           "tierzero.activation_checkpointing turns checkpointing on)");
  if (r.get_bool("cpu_checkpointing", false))
    r.fail("cpu_checkpointing",
           "= true is not supported: checkpoints stay in device memory (remove the key or set "
           "it false; tierzero.activation_checkpointing turns checkpointing on)");
  a.contiguous_memory_optimization =
      r.get_bool("contiguous_memory_optimization", a.contiguous_memory_optimization);
  if (r.is_null("number_checkpoints"))  // DeepSpeed's default is null: unset
    r.accept({"number_checkpoints"});
  else
    a.number_checkpoints = r.get_int("number_checkpoints", a.number_checkpoints, 0, 1 << 20);
  r.get_bool("synchronize_checkpoint_boundary", false);  // type-checked, then:
  cosmetic(r, "synchronize_checkpoint_boundary", ignored);
  r.get_bool("profile", false);
  cosmetic(r, "profile", ignored);
  r.finish();
}

bool read_bf16(ConfigReader r) {
  const bool on = r.get_bool("enabled", false);
  // Gradients are accumulated in fp32 as they are produced; either value reads.
  r.get_bool("immediate_grad_update", true);
  r.finish();
  return on;
}

bool read_fp16(ConfigReader r, LossScaleConfig& scaling) {
  const bool on = r.get_bool("enabled", false);
  scaling.loss_scale = r.get_number("loss_scale", scaling.loss_scale, 0.0, 1.0e30);
  scaling.initial_scale_power =
      r.get_int("initial_scale_power", scaling.initial_scale_power, 0, 127);
  scaling.loss_scale_window = r.get_int("loss_scale_window", scaling.loss_scale_window, 1, kMaxInt);
  scaling.hysteresis = r.get_int("hysteresis", scaling.hysteresis, 1, kMaxInt);
  scaling.consecutive_hysteresis =
      r.get_bool("consecutive_hysteresis", scaling.consecutive_hysteresis);
  scaling.min_loss_scale = r.get_number("min_loss_scale", scaling.min_loss_scale, 1.0e-30, 1.0e30);
  only_bool(r, "auto_cast", false, "the model's inputs are token ids; there is nothing to cast");
  only_bool(r, "fp16_master_weights_and_grads", false,
            "TierZero keeps fp32 master weights, gradients and Adam states");
  r.get_bool("immediate_grad_update", true);  // as in bf16
  r.finish();
  return on;
}

// A dtype as DeepSpeed names it (fp32, fp16 or bf16; null: `fallback`).
std::string read_dtype(ConfigReader& r, const std::string& key, const std::string& fallback) {
  if (r.is_null(key)) {
    r.accept({key});
    return fallback;
  }
  return r.get_string(key, fallback, {"fp32", "fp16", "bf16"});
}

// A collective's or accumulator's dtype that TierZero keeps in fp32: other values are refused.
void only_fp32(ConfigReader& r, const std::string& key, const std::string& why) {
  const std::string v = read_dtype(r, key, "fp32");
  if (v != "fp32") r.fail(key, "= \"" + v + "\" is not supported: " + why);
}

// DeepSpeed's Apex AMP section: only off (its other keys are Apex's options, unused then).
void read_amp(ConfigReader r) {
  only_bool(r, "enabled", false,
            "Apex AMP is not supported; use bf16.enabled or fp16.enabled (16-bit working "
            "parameters, fp32 master weights)");
  r.accept(r.keys());
  r.finish();
}

void read_data_types(ConfigReader r) {
  only_fp32(r, "grad_accum_dtype", "gradients are accumulated in fp32");
  r.finish();
}

// DeepSpeed's "checkpoint" section. TierZero's training checkpoints (tierzero.checkpoint) are
// always validated against the run and reshard to any layout, and every rank writes its own
// shard into the shared directory.
void read_ds_checkpoint(ConfigReader r) {
  r.get_string("tag_validation", "Warn", {"Ignore", "Warn", "Fail", "ignore", "warn", "fail"});
  r.get_bool("load_universal", false);
  only_bool(r, "use_node_local_storage", false,
            "the checkpoint directory is one directory every rank writes to (shared storage)");
  if (r.has("parallel_write")) {
    ConfigReader p = r.child("parallel_write");
    p.get_bool("pipeline_stage", false);
    p.finish();
  }
  r.finish();
}

// Hugging Face's rope_scaling object; only rope_type "llama3" is built.
void read_rope_scaling(ConfigReader r, nn::RopeScaling& s) {
  const std::string type = r.get_string("rope_type", "llama3");
  if (type != "llama3") r.fail("rope_type", "= " + type + " is not supported (only llama3)");
  s.llama3 = true;
  s.factor = r.get_number("factor", s.factor, 1e-6, 1e6);
  s.low_freq_factor = r.get_number("low_freq_factor", s.low_freq_factor, 1e-6, 1e6);
  s.high_freq_factor = r.get_number("high_freq_factor", s.high_freq_factor, 1e-6, 1e6);
  s.original_max_position_embeddings = static_cast<size_t>(
      r.get_int("original_max_position_embeddings",
                static_cast<int64_t>(s.original_max_position_embeddings), 1, 1 << 24));
  if (s.high_freq_factor <= s.low_freq_factor)
    r.fail("high_freq_factor", "must be larger than low_freq_factor");
  r.finish();
}

// One of `names` (the enum's values in order), or the fallback's index.
template <typename E>
E read_choice(ConfigReader& r, const std::string& key, E fallback,
              const std::vector<std::string>& names) {
  const std::string v = r.get_string(key, names[static_cast<size_t>(fallback)]);
  for (size_t i = 0; i < names.size(); ++i)
    if (v == names[i]) return static_cast<E>(i);
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : " or ") + n;
  r.fail(key, "= " + v + " is not one of " + all);
  return fallback;
}

// The architecture keys (GPT-2's values unless given). "architecture": "llama" starts from the
// Llama family's parts (RMSNorm, rotary positions, SwiGLU, no biases, untied head).
void read_arch(ConfigReader& r, ModelShape& m) {
  nn::GPTArch& a = m.arch;
  const std::string family = r.get_string("architecture", a.is_gpt2() ? "gpt2" : "llama");
  if (family == "llama" && a.is_gpt2()) {
    a.norm = nn::NormKind::rmsnorm;
    a.positions = nn::PositionKind::rope;
    a.mlp = nn::MlpKind::swiglu;
    a.qkv_bias = a.linear_bias = a.tie_embeddings = false;
  } else if (family != "llama" && family != "gpt2") {
    r.fail("architecture", "= " + family + " is not one of gpt2 or llama");
  }
  a.norm = read_choice(r, "norm", a.norm, {"layernorm", "rmsnorm"});
  a.norm_eps = r.get_number("rms_norm_eps", a.norm_eps, 1e-12, 1.0);
  a.positions = read_choice(r, "positions", a.positions, {"learned", "rope"});
  a.rope_theta = r.get_number("rope_theta", a.rope_theta, 1.0, 1e12);
  if (r.has("rope_scaling") && !r.is_null("rope_scaling"))
    read_rope_scaling(r.child("rope_scaling"), a.rope_scaling);
  else if (r.has("rope_scaling"))
    r.accept({"rope_scaling"});
  a.mlp = read_choice(r, "mlp", a.mlp, {"gelu", "swiglu"});
  a.intermediate_size = static_cast<size_t>(r.get_int(
      "intermediate_size", static_cast<int64_t>(a.intermediate_size), 0, int64_t{1} << 24));
  a.num_kv_heads = static_cast<size_t>(
      r.get_int("num_key_value_heads", static_cast<int64_t>(a.num_kv_heads), 0, 4096));
  a.head_dim = static_cast<size_t>(
      r.get_int("head_dim", static_cast<int64_t>(a.head_dim), 0, int64_t{1} << 16));
  a.qkv_bias = r.get_bool("qkv_bias", a.qkv_bias);
  a.linear_bias = r.get_bool("proj_bias", a.linear_bias);
  a.tie_embeddings = r.get_bool("tie_word_embeddings", a.tie_embeddings);
}

void read_model(ConfigReader r, ModelShape& m) {
  m.vocab_size = r.get_int("vocab_size", m.vocab_size, 2, 1 << 24);
  m.padded_vocab_size = r.get_int("padded_vocab_size", m.padded_vocab_size, 0, 1 << 24);
  m.classifier_chunk_tokens =
      r.get_int("classifier_chunk_tokens", m.classifier_chunk_tokens, 0, int64_t{1} << 40);
  m.context_length = r.get_int("context_length", m.context_length, 1, 1 << 20);
  m.n_layer = r.get_int("n_layer", m.n_layer, 1, kMaxLayers);
  m.n_head = r.get_int("n_head", m.n_head, 1, kMaxHeads);
  m.n_embd = r.get_int("n_embd", m.n_embd, 1, kMaxChannels);
  read_arch(r, m);
  if (m.arch.head_dim == 0 && m.n_embd % m.n_head != 0)
    r.fail("n_embd", "= " + std::to_string(m.n_embd) +
                         " must be divisible by n_head = " + std::to_string(m.n_head));
  if (m.arch.num_kv_heads != 0 && m.n_head % static_cast<int64_t>(m.arch.num_kv_heads) != 0)
    r.fail("num_key_value_heads", "= " + std::to_string(m.arch.num_kv_heads) +
                                      " must divide n_head = " + std::to_string(m.n_head));
  if (m.padded_vocab_size != 0 && m.padded_vocab_size < m.vocab_size)
    r.fail("padded_vocab_size",
           "= " + std::to_string(m.padded_vocab_size) +
               " is smaller than vocab_size = " + std::to_string(m.vocab_size));
  r.finish();
}

void read_checkpoint(ConfigReader r, TrainConfig::CheckpointConfig& c) {
  c.save_dir = r.get_string("save_dir", c.save_dir);
  c.save_every = r.get_int("save_every", c.save_every, 0, kMaxInt);
  c.keep_last = r.get_int("keep_last", c.keep_last, 0, kMaxInt);
  c.resume = r.get_string("resume", c.resume);
  r.finish();
}

void read_activation_placement(ConfigReader r, ActivationCheckpointPlacement& a) {
  a.device = r.get_string("device", a.device, {"device", "cpu", "host", "nvme"});
  if (a.device == "host") a.device = "cpu";
  a.nvme_path = r.get_string("nvme_path", a.nvme_path);
  a.buffer_count = r.get_int("buffer_count", a.buffer_count, 2, 1 << 20);
  if (a.device == "nvme" && a.nvme_path.empty())
    r.fail("nvme_path", "is empty but device is \"nvme\"; name a directory on the drive");
  r.finish();
}

void read_tierzero(ConfigReader r, TrainConfig& c) {
  read_model(r.child("model"), c.model);
  read_checkpoint(r.child("checkpoint"), c.checkpoint);
  c.seq_len = r.get_int("seq_len", c.seq_len, 1, 1 << 20);
  c.steps = r.get_int("steps", c.steps, 0, kMaxInt);
  c.seed = static_cast<uint64_t>(r.get_int("seed", static_cast<int64_t>(c.seed), 0, kMaxInt));
  c.device = r.get_string("device", c.device);
  c.threads = r.get_int("threads", c.threads, 0, 4096);
  c.train_data = r.get_string("train_data", c.train_data);
  c.val_data = r.get_string("val_data", c.val_data);
  c.val_every = r.get_int("val_every", c.val_every, 0, kMaxInt);
  c.val_batches = r.get_int("val_batches", c.val_batches, 0, 1 << 20);
  c.load_checkpoint = r.get_string("load_checkpoint", c.load_checkpoint);
  c.save_checkpoint = r.get_string("save_checkpoint", c.save_checkpoint);
  c.log_level = r.get_string("log_level", c.log_level, {"debug", "info", "warn", "error", "off"});
  c.tf32 = r.get_bool("tf32", c.tf32);
  c.compute_dtype =
      r.get_string("compute_dtype", c.compute_dtype, {"auto", "fp32", "bf16", "fp16"});
  c.device_memory_budget_gb =
      r.get_number("device_memory_budget_gb", c.device_memory_budget_gb, 0.0, 1.0e6);
  c.activation_checkpointing = r.get_bool("activation_checkpointing", c.activation_checkpointing);
  c.recompute = r.get_string("recompute", c.recompute, {"none", "selective", "full"});
  if (c.activation_checkpointing && c.recompute == "selective")
    r.fail("recompute",
           "is selective but tierzero.activation_checkpointing is true (full "
           "recompute); set only one of them");
  if (c.activation_checkpointing) c.recompute = "full";
  c.activation_checkpointing = c.recompute == "full";
  read_activation_placement(r.child("activation_checkpoints"), c.activation_checkpoints);
  c.host_memory_budget_gb =
      r.get_number("host_memory_budget_gb", c.host_memory_budget_gb, 0.0, 1.0e6);
  c.blocks_per_unit = r.get_int("blocks_per_unit", c.blocks_per_unit, 1, 1 << 20);
  c.offload_gradients = r.get_string("offload_gradients", c.offload_gradients, {"cpu", "nvme"});
  c.optimizer_overlap =
      r.get_string("optimizer_overlap", c.optimizer_overlap, {"off", "plain", "speculative"});
  c.tensor_parallel = r.get_int("tensor_parallel", c.tensor_parallel, 1, 4096);
  c.sequence_parallel = r.get_bool("sequence_parallel", c.sequence_parallel);
  c.ulysses_parallel = r.get_int("ulysses_parallel", c.ulysses_parallel, 1, 4096);
  c.pipeline_parallel = r.get_int("pipeline_parallel", c.pipeline_parallel, 1, 4096);
  c.pipeline_schedule =
      r.get_string("pipeline_schedule", c.pipeline_schedule, {"gpipe", "1f1b", "interleaved"});
  c.pipeline_virtual_stages =
      r.get_int("pipeline_virtual_stages", c.pipeline_virtual_stages, 1, 4096);
  c.pipeline_receive_ahead = r.get_bool("pipeline_receive_ahead", c.pipeline_receive_ahead);
  // One block count per virtual stage (get_numbers checks the count).
  const auto listed =
      static_cast<size_t>(c.pipeline_parallel) * static_cast<size_t>(c.pipeline_virtual_stages);
  for (double v : r.get_numbers("pipeline_stages", {}, listed, 1.0, 1.0e6)) {
    if (v != static_cast<double>(static_cast<int64_t>(v)))
      r.fail("pipeline_stages", "holds " + std::to_string(v) + ", not a whole number of blocks");
    c.pipeline_stages.push_back(static_cast<int64_t>(v));
  }
  if (!is_device_name(c.device))
    r.fail("device", "= \"" + c.device + "\" is not cpu, cuda or cuda:N");
  if (c.seq_len > c.model.context_length)
    r.fail("seq_len", "= " + std::to_string(c.seq_len) + " exceeds model.context_length = " +
                          std::to_string(c.model.context_length));
  r.finish();
}

}  // namespace

TrainConfig TrainConfig::defaults() {
  return parse("{}", "defaults");
}

TrainConfig TrainConfig::parse(const std::string& text, const std::string& source) {
  const nlohmann::json j =
      parse_json_text(text, "config error: " + source, "fix the JSON at the line and column named",
                      /*allow_comments=*/true);
  TrainConfig c;
  ConfigReader r(j, source);
  c.micro_batch_size = r.get_int("train_micro_batch_size_per_gpu", c.micro_batch_size, 1, 1 << 20);
  c.gradient_accumulation_steps =
      r.get_int("gradient_accumulation_steps", c.gradient_accumulation_steps, 1, 1 << 20);
  c.train_batch_size = r.get_int("train_batch_size", c.train_batch_size, 0, kMaxInt);
  c.micro_batch_given = j.contains("train_micro_batch_size_per_gpu");
  c.accumulation_given = j.contains("gradient_accumulation_steps");
  c.gradient_clipping = r.get_number("gradient_clipping", c.gradient_clipping, 0.0, 1.0e9);
  // TierZero prints every step (and writes each to --metrics).
  r.get_int("steps_per_print", 10, 1, kMaxInt);
  cosmetic(r, "steps_per_print", c.ignored_keys);
  read_optimizer(r.child("optimizer"), c.optimizer);
  read_scheduler(r.child("scheduler"), c.scheduler);
  c.bf16 = read_bf16(r.child("bf16"));
  c.fp16 = read_fp16(r.child("fp16"), c.fp16_scaling);
  if (c.bf16 && c.fp16) r.fail("fp16", "and bf16 are both enabled; choose one");
  read_zero(r.child("zero_optimization"), c.zero);
  read_aio(r.child("aio"), c.aio);
  read_activation_checkpointing(r.child("activation_checkpointing"), c.ds_activation_checkpointing,
                                c.ignored_keys);
  read_amp(r.child("amp"));
  read_data_types(r.child("data_types"));
  read_ds_checkpoint(r.child("checkpoint"));
  read_tierzero(r.child("tierzero"), c);
  // (train_batch_size against the other two: resolve_global_batch, once the ranks are known.)
  only_number(r, "gradient_predivide_factor", 1.0,
              "gradients are averaged by the reduction itself (its mean over the ranks)");
  only_bool(r, "prescale_gradients", false,
            "gradients are averaged by the reduction itself (its mean over the ranks)");
  c.communication_data_type = read_dtype(r, "communication_data_type", c.communication_data_type);
  only_fp32(r, "seq_parallel_communication_data_type",
            "the Ulysses all-to-alls move fp32 activations");
  // Permissions for optimizers other than DeepSpeed's own: TierZero has one AdamW (on the host
  // when offloaded), so they read at any value.
  r.get_bool("zero_allow_untested_optimizer", false);
  r.get_bool("zero_force_ds_cpu_optimizer", true);
  for (const char* key : {"wall_clock_breakdown", "dump_state", "memory_breakdown", "tensorboard",
                          "wandb", "csv_monitor", "comet", "comms_logger", "flops_profiler"})
    cosmetic(r, key, c.ignored_keys);
  r.finish();
  return c;
}

std::string TrainConfig::ignored_keys_warning() const {
  if (ignored_keys.empty()) return "";
  std::string list;
  for (const std::string& k : ignored_keys) list += (list.empty() ? "" : ", ") + k;
  return "config keys ignored (in DeepSpeed they only log, time or report): " + list;
}

TrainConfig TrainConfig::load(const std::string& path) {
  // A config is a few KB; 64 MiB bounds what a mistaken path (a data file) can cost.
  const std::string text =
      read_input_file(path, "config file", "check the path given to --config", size_t{64} << 20);
  TrainConfig c = parse(text, "'" + path + "'");
  c.config_file = path;
  return c;
}

void apply_model_name(const std::string& text, ModelShape& m) {
  int64_t layers = 0, heads = 0, channels = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%" SCNd64 ",%" SCNd64 ",%" SCNd64 "%c", &layers, &heads, &channels,
                  &tail) == 3) {
    TZ_CHECK(layers > 0 && heads > 0 && channels > 0 && channels % heads == 0,
             "--model " + text +
                 ": layers, heads and channels must be positive and heads must "
                 "divide channels",
             "e.g. --model 48,25,1600 (GPT-2 XL's shape)");
    // The config's ranges (read_model), so a shape given here is held to the same limits.
    TZ_CHECK(layers <= kMaxLayers && heads <= kMaxHeads && channels <= kMaxChannels,
             "--model " + text + ": layers, heads or channels out of range (at most " +
                 std::to_string(kMaxLayers) + ", " + std::to_string(kMaxHeads) + " and " +
                 std::to_string(kMaxChannels) + ")",
             "the same limits as tierzero.model.n_layer, n_head and n_embd");
    m.n_layer = layers, m.n_head = heads, m.n_embd = channels;
    return;
  }
  const nn::GPTConfig p = nn::GPTConfig::preset(text);  // its error lists the presets
  m.vocab_size = static_cast<int64_t>(p.vocab_size);
  m.padded_vocab_size = static_cast<int64_t>(p.padded_vocab_size);
  m.context_length = static_cast<int64_t>(p.max_seq_len);
  m.n_layer = static_cast<int64_t>(p.num_layers);
  m.n_head = static_cast<int64_t>(p.num_heads);
  m.n_embd = static_cast<int64_t>(p.channels);
  m.arch = p.arch;
}

}  // namespace tierzero::train
