// Parsing and validation of TrainConfig. Each section is read by one function with a
// ConfigReader, which rejects unknown keys; cross-field rules are checked at the end.
#include "tierzero/train/train_config.hpp"

#include <fstream>
#include <limits>
#include <sstream>

#include "tierzero/core/config_reader.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::train {

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

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

void read_scheduler(ConfigReader r, SchedulerConfig& s) {
  s.type = r.get_string("type", s.type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "none"});
  ConfigReader p = r.child("params");
  s.warmup_num_steps = p.get_int("warmup_num_steps", s.warmup_num_steps, 0, kMaxInt);
  s.total_num_steps = p.get_int("total_num_steps", s.total_num_steps, 0, kMaxInt);
  s.warmup_type = p.get_string("warmup_type", s.warmup_type, {"linear", "log"});
  s.warmup_min_ratio = p.get_number("warmup_min_ratio", s.warmup_min_ratio, 0.0, 1.0);
  s.cos_min_ratio = p.get_number("cos_min_ratio", s.cos_min_ratio, 0.0, 1.0);
  s.warmup_min_lr = p.get_number("warmup_min_lr", s.warmup_min_lr, 0.0, 10.0);
  s.warmup_max_lr = p.get_number("warmup_max_lr", s.warmup_max_lr, 0.0, 10.0);
  p.accept({"last_batch_iteration"});
  p.finish();
  r.finish();
}

void read_offload(ConfigReader r, OffloadConfig& o, bool optimizer) {
  o.device = r.get_string("device", o.device, {"none", "cpu", "nvme"});
  o.nvme_path = r.get_string("nvme_path", o.nvme_path);
  o.pin_memory = r.get_bool("pin_memory", o.pin_memory);
  o.buffer_count = r.get_int("buffer_count", o.buffer_count, 1, 1024);
  o.buffer_size = r.get_int("buffer_size", o.buffer_size, 1, kMaxInt);
  // DeepSpeed has ratio for the optimizer only; TierZero also offloads a fraction of the units'
  // parameters with it.
  o.ratio = r.get_number("ratio", o.ratio, 0.0, 1.0);
  if (optimizer) {
    r.accept({"fast_init", "pipeline_read", "pipeline_write", "pipeline"});
  } else {
    r.accept({"max_in_cpu"});
  }
  if (o.device == "nvme" && o.nvme_path.empty())
    r.fail("device", "= \"nvme\" needs nvme_path (a directory on the drive to swap to)");
  r.finish();
}

void read_zero(ConfigReader r, ZeroConfig& z) {
  z.stage = r.get_int("stage", z.stage, 0, 3);
  read_offload(r.child("offload_param"), z.offload_param, false);
  read_offload(r.child("offload_optimizer"), z.offload_optimizer, true);
  z.overlap_comm = r.get_bool("overlap_comm", z.overlap_comm);
  z.contiguous_gradients = r.get_bool("contiguous_gradients", z.contiguous_gradients);
  z.reduce_bucket_size = r.get_int("reduce_bucket_size", z.reduce_bucket_size, 1, kMaxInt);
  z.allgather_bucket_size = r.get_int("allgather_bucket_size", z.allgather_bucket_size, 1, kMaxInt);
  z.prefetch_bucket_size =
      r.get_int("stage3_prefetch_bucket_size", z.prefetch_bucket_size, 0, kMaxInt);
  z.param_persistence_threshold =
      r.get_int("stage3_param_persistence_threshold", z.param_persistence_threshold, 0, kMaxInt);
  z.max_live_parameters =
      r.get_int("stage3_max_live_parameters", z.max_live_parameters, 0, kMaxInt);
  z.max_reuse_distance = r.get_int("stage3_max_reuse_distance", z.max_reuse_distance, 0, kMaxInt);
  r.accept({"allgather_partitions", "reduce_scatter", "round_robin_gradients", "sub_group_size",
            "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
            "elastic_checkpoint", "ignore_unused_parameters", "load_from_fp32_weights",
            "cpu_offload", "zero_hpz_partition_size", "zero_quantized_weights",
            "zero_quantized_gradients", "memory_efficient_linear",
            "use_multi_rank_bucket_allreduce"});
  if (z.offload_param.device != "none" && z.stage != 3)
    r.fail("offload_param", "needs stage 3 (parameters are only partitioned in stage 3)");
  r.finish();
}

void read_aio(ConfigReader r, AioConfig& a) {
  a.block_size = r.get_int("block_size", a.block_size, 4096, int64_t{1} << 30);
  if (a.block_size % 4096 != 0) r.fail("block_size", "must be a multiple of 4096 (O_DIRECT)");
  a.queue_depth = r.get_int("queue_depth", a.queue_depth, 1, 4096);
  a.intra_op_parallelism = r.get_int("intra_op_parallelism", a.intra_op_parallelism, 1, 256);
  if (r.has("thread_count"))  // older DeepSpeed name for the same knob
    a.intra_op_parallelism = r.get_int("thread_count", a.intra_op_parallelism, 1, 256);
  a.single_submit = r.get_bool("single_submit", a.single_submit);
  a.overlap_events = r.get_bool("overlap_events", a.overlap_events);
  if (r.get_bool("use_gds", false))
    r.fail("use_gds",
           "= true: GPUDirect Storage is not supported; TierZero stages NVMe I/O "
           "through pinned host memory (remove the key or set it false)");
  r.finish();
}

// DeepSpeed's activation_checkpointing section: checkpointing itself is switched on by
// tierzero.activation_checkpointing (in DeepSpeed the model code decides), so these keys are
// validated and, apart from the two refused features, have no effect.
void read_activation_checkpointing(ConfigReader r, DeepSpeedActivationCheckpointing& a) {
  a.partition_activations = r.get_bool("partition_activations", a.partition_activations);
  if (a.partition_activations)
    r.fail("partition_activations",
           "= true is not supported: TierZero does not partition activations across "
           "model-parallel ranks (remove the key or set it false; "
           "tierzero.activation_checkpointing turns checkpointing on)");
  a.cpu_checkpointing = r.get_bool("cpu_checkpointing", a.cpu_checkpointing);
  if (a.cpu_checkpointing)
    r.fail("cpu_checkpointing",
           "= true is not supported: checkpoints stay in device memory (remove the key or set "
           "it false; tierzero.activation_checkpointing turns checkpointing on)");
  a.contiguous_memory_optimization =
      r.get_bool("contiguous_memory_optimization", a.contiguous_memory_optimization);
  if (r.is_null("number_checkpoints"))  // DeepSpeed's default is null: unset
    r.accept({"number_checkpoints"});
  else
    a.number_checkpoints = r.get_int("number_checkpoints", a.number_checkpoints, 0, 1 << 20);
  a.synchronize_checkpoint_boundary =
      r.get_bool("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  a.profile = r.get_bool("profile", a.profile);
  r.finish();
}

bool read_enabled(ConfigReader r, LossScaleConfig* scaling = nullptr) {
  bool on = r.get_bool("enabled", false);
  if (scaling) {
    scaling->loss_scale = r.get_number("loss_scale", scaling->loss_scale, 0.0, 1.0e30);
    scaling->initial_scale_power =
        r.get_int("initial_scale_power", scaling->initial_scale_power, 0, 127);
    scaling->loss_scale_window =
        r.get_int("loss_scale_window", scaling->loss_scale_window, 1, kMaxInt);
    scaling->hysteresis = r.get_int("hysteresis", scaling->hysteresis, 1, kMaxInt);
    scaling->min_loss_scale =
        r.get_number("min_loss_scale", scaling->min_loss_scale, 1.0e-30, 1.0e30);
  }
  r.accept({"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
            "consecutive_hysteresis", "min_loss_scale", "auto_cast", "immediate_grad_update",
            "fp16_master_weights_and_grads"});
  r.finish();
  return on;
}

void read_model(ConfigReader r, ModelShape& m) {
  m.vocab_size = r.get_int("vocab_size", m.vocab_size, 2, 1 << 24);
  m.padded_vocab_size = r.get_int("padded_vocab_size", m.padded_vocab_size, 0, 1 << 24);
  m.context_length = r.get_int("context_length", m.context_length, 1, 1 << 20);
  m.n_layer = r.get_int("n_layer", m.n_layer, 1, 4096);
  m.n_head = r.get_int("n_head", m.n_head, 1, 4096);
  m.n_embd = r.get_int("n_embd", m.n_embd, 1, 1 << 20);
  if (m.n_embd % m.n_head != 0)
    r.fail("n_embd", "= " + std::to_string(m.n_embd) +
                         " must be divisible by n_head = " + std::to_string(m.n_head));
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
  c.device_memory_budget_gb =
      r.get_number("device_memory_budget_gb", c.device_memory_budget_gb, 0.0, 1.0e6);
  c.activation_checkpointing = r.get_bool("activation_checkpointing", c.activation_checkpointing);
  c.host_memory_budget_gb =
      r.get_number("host_memory_budget_gb", c.host_memory_budget_gb, 0.0, 1.0e6);
  c.blocks_per_unit = r.get_int("blocks_per_unit", c.blocks_per_unit, 1, 1 << 20);
  c.offload_gradients = r.get_string("offload_gradients", c.offload_gradients, {"cpu", "nvme"});
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
  if (c.device != "cpu" && c.device != "cuda" && c.device.rfind("cuda:", 0) != 0)
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    TZ_THROW("config error in " + source + ": not valid JSON: " + e.what(),
             "check the byte offset named in the message");
  }
  TrainConfig c;
  ConfigReader r(j, source);
  c.micro_batch_size = r.get_int("train_micro_batch_size_per_gpu", c.micro_batch_size, 1, 1 << 20);
  c.gradient_accumulation_steps =
      r.get_int("gradient_accumulation_steps", c.gradient_accumulation_steps, 1, 1 << 20);
  c.train_batch_size = r.get_int("train_batch_size", c.train_batch_size, 0, kMaxInt);
  c.gradient_clipping = r.get_number("gradient_clipping", c.gradient_clipping, 0.0, 1.0e9);
  c.steps_per_print = r.get_int("steps_per_print", c.steps_per_print, 1, kMaxInt);
  read_optimizer(r.child("optimizer"), c.optimizer);
  read_scheduler(r.child("scheduler"), c.scheduler);
  c.bf16 = read_enabled(r.child("bf16"));
  c.fp16 = read_enabled(r.child("fp16"), &c.fp16_scaling);
  if (c.bf16 && c.fp16) r.fail("fp16", "and bf16 are both enabled; choose one");
  read_zero(r.child("zero_optimization"), c.zero);
  read_aio(r.child("aio"), c.aio);
  read_activation_checkpointing(r.child("activation_checkpointing"), c.ds_activation_checkpointing);
  read_tierzero(r.child("tierzero"), c);
  if (c.train_batch_size != 0 &&
      c.train_batch_size % (c.micro_batch_size * c.gradient_accumulation_steps) != 0)
    r.fail("train_batch_size",
           "= " + std::to_string(c.train_batch_size) +
               " is not a multiple of train_micro_batch_size_per_gpu x "
               "gradient_accumulation_steps = " +
               std::to_string(c.micro_batch_size * c.gradient_accumulation_steps));
  // Keys DeepSpeed knows that do not change what TierZero computes.
  r.accept({"wall_clock_breakdown", "zero_allow_untested_optimizer", "gradient_predivide_factor",
            "prescale_gradients", "dump_state", "communication_data_type", "tensorboard", "wandb",
            "csv_monitor", "comms_logger", "flops_profiler", "memory_breakdown",
            "zero_force_ds_cpu_optimizer", "amp", "data_types", "checkpoint",
            "seq_parallel_communication_data_type"});
  r.finish();
  return c;
}

TrainConfig TrainConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    TZ_THROW("cannot read config file '" + path + "': " + errno_string(),
             "check the path given to --config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), "'" + path + "'");
}

}  // namespace tierzero::train
