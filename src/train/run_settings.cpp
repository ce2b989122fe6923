// The canonical list of a run's settings that every rank must share (see the header for what is
// left out and why), its text form and digest, and the first difference between two lists.
#include "tierzero/train/run_settings.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "tierzero/core/error.hpp"
#include "tierzero/train/token_shards.hpp"

#ifndef TZ_VERSION
#define TZ_VERSION "unknown"
#endif

namespace tierzero::train {

namespace {

// What the build is: the version and the backends compiled in (a CPU-only and a CUDA build
// differ in what "device": "cuda" does).
std::string build_identity() {
  std::string b = TZ_VERSION;
#ifdef TIERZERO_HAVE_CUDA
  b += ", cuda";
#else
  b += ", cpu only";
#endif
#ifdef TZ_COMM_HAVE_NCCL
  b += ", nccl";
#endif
  return b;
}

// A file's name (without its directory, which may differ per node) and size, or why it has none.
std::string file_identity(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string name =
      nlohmann::json(slash == std::string::npos ? path : path.substr(slash + 1))
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return name + " (unreadable: " + std::strerror(errno) + ")";
  if (S_ISDIR(st.st_mode)) return name + " (a directory)";
  return name + " (" + std::to_string(st.st_size) + " bytes)";
}

class SettingsBuilder {
 public:
  void add(const std::string& name, const std::string& value) { out_.push_back({name, value}); }
  void number(const std::string& name, int64_t v) { add(name, std::to_string(v)); }
  void number(const std::string& name, double v) { add(name, nlohmann::json(v).dump()); }
  void flag(const std::string& name, bool v) { add(name, v ? "true" : "false"); }
  void text(const std::string& name, const std::string& v) {
    add(name, nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  // The files a glob matches, by name and size: their count, then each one.
  void files(const std::string& name, const std::string& pattern) {
    if (pattern.empty()) {
      add(name, "none");
      return;
    }
    const std::vector<std::string> paths = token_shard_paths(pattern);
    add(name + " files", std::to_string(paths.size()));
    for (size_t i = 0; i < paths.size(); ++i)
      add(name + " file " + std::to_string(i), file_identity(paths[i]));
  }
  RunSettings take() { return std::move(out_); }

 private:
  RunSettings out_;
};

void add_deepspeed_keys(SettingsBuilder& s, const TrainConfig& c) {
  s.number("train_micro_batch_size_per_gpu", c.micro_batch_size);
  s.number("gradient_accumulation_steps", c.gradient_accumulation_steps);
  s.number("train_batch_size", c.train_batch_size);
  s.number("gradient_clipping", c.gradient_clipping);
  const OptimizerConfig& o = c.optimizer;
  s.text("optimizer.type", o.type);
  s.number("optimizer.params.lr", o.lr);
  s.add("optimizer.params.betas", nlohmann::json({o.beta1, o.beta2}).dump());
  s.number("optimizer.params.eps", o.eps);
  s.number("optimizer.params.weight_decay", o.weight_decay);
  const SchedulerConfig& l = c.scheduler;
  s.text("scheduler.type", l.type);
  s.number("scheduler.params.warmup_num_steps", l.warmup_num_steps);
  s.number("scheduler.params.total_num_steps", l.total_num_steps);
  s.text("scheduler.params.warmup_type", l.warmup_type);
  s.number("scheduler.params.warmup_min_ratio", l.warmup_min_ratio);
  s.number("scheduler.params.cos_min_ratio", l.cos_min_ratio);
  s.number("scheduler.params.warmup_min_lr", l.warmup_min_lr);
  s.number("scheduler.params.warmup_max_lr", l.warmup_max_lr);
  s.flag("bf16.enabled", c.bf16);
  s.flag("fp16.enabled", c.fp16);
  const LossScaleConfig& f = c.fp16_scaling;
  s.number("fp16.loss_scale", f.loss_scale);
  s.number("fp16.initial_scale_power", f.initial_scale_power);
  s.number("fp16.loss_scale_window", f.loss_scale_window);
  s.number("fp16.hysteresis", f.hysteresis);
  s.number("fp16.min_loss_scale", f.min_loss_scale);
  s.flag("fp16.consecutive_hysteresis", f.consecutive_hysteresis);
  s.text("communication_data_type", c.communication_data_type);
}

// nvme_path is left out: it names the node's own drive.
void add_offload_keys(SettingsBuilder& s, const std::string& prefix, const OffloadConfig& o) {
  s.text(prefix + "device", o.device);
  s.number(prefix + "ratio", o.ratio);
  s.number(prefix + "buffer_count", o.buffer_count);
  s.number(prefix + "buffer_size", o.buffer_size);
}

void add_zero_keys(SettingsBuilder& s, const ZeroConfig& z) {
  s.number("zero_optimization.stage", z.stage);
  s.flag("zero_optimization.overlap_comm", z.overlap_comm);
  s.number("zero_optimization.reduce_bucket_size", z.reduce_bucket_size);
  s.number("zero_optimization.allgather_bucket_size", z.allgather_bucket_size);
  s.number("zero_optimization.stage3_prefetch_bucket_size", z.prefetch_bucket_size);
  s.number("zero_optimization.stage3_param_persistence_threshold", z.param_persistence_threshold);
  s.number("zero_optimization.stage3_max_live_parameters", z.max_live_parameters);
  s.number("zero_optimization.stage3_max_reuse_distance", z.max_reuse_distance);
  add_offload_keys(s, "zero_optimization.offload_param.", z.offload_param);
  add_offload_keys(s, "zero_optimization.offload_optimizer.", z.offload_optimizer);
}

void add_tierzero_keys(SettingsBuilder& s, const TrainConfig& c) {
  const ModelShape& m = c.model;
  s.number("tierzero.model.vocab_size", m.vocab_size);
  s.number("tierzero.model.padded_vocab_size", m.padded_vocab_size);
  s.number("tierzero.model.context_length", m.context_length);
  s.number("tierzero.model.n_layer", m.n_layer);
  s.number("tierzero.model.n_head", m.n_head);
  s.number("tierzero.model.n_embd", m.n_embd);
  s.number("tierzero.seq_len", c.seq_len);
  s.number("tierzero.steps", c.steps);
  s.add("tierzero.seed", std::to_string(c.seed));
  // The backend, not the GPU index: "cuda:N" may name another GPU on each rank.
  s.text("tierzero.device", c.device.rfind("cuda", 0) == 0 ? "cuda" : c.device);
  s.files("tierzero.train_data", c.train_data);
  s.files("tierzero.val_data", c.val_data);
  s.number("tierzero.val_every", c.val_every);
  s.number("tierzero.val_batches", c.val_batches);
  s.add("tierzero.load_checkpoint",
        c.load_checkpoint.empty() ? "none" : file_identity(c.load_checkpoint));
  s.text("tierzero.save_checkpoint", c.save_checkpoint);
  s.text("tierzero.checkpoint.save_dir", c.checkpoint.save_dir);
  s.number("tierzero.checkpoint.save_every", c.checkpoint.save_every);
  s.number("tierzero.checkpoint.keep_last", c.checkpoint.keep_last);
  s.text("tierzero.checkpoint.resume", c.checkpoint.resume);
  s.text("tierzero.offload_gradients", c.offload_gradients);
  s.text("tierzero.optimizer_overlap", c.optimizer_overlap);
  s.number("tierzero.blocks_per_unit", c.blocks_per_unit);
  s.flag("tierzero.activation_checkpointing", c.activation_checkpointing);
  s.text("tierzero.recompute", c.recompute);
  s.text("tierzero.compute_dtype", c.compute_dtype);
  s.number("tierzero.tensor_parallel", c.tensor_parallel);
  s.flag("tierzero.sequence_parallel", c.sequence_parallel);
  s.number("tierzero.ulysses_parallel", c.ulysses_parallel);
  s.number("tierzero.pipeline_parallel", c.pipeline_parallel);
  s.text("tierzero.pipeline_schedule", c.pipeline_schedule);
  s.number("tierzero.pipeline_virtual_stages", c.pipeline_virtual_stages);
  s.add("tierzero.pipeline_stages", nlohmann::json(c.pipeline_stages).dump());
  s.flag("tierzero.pipeline_receive_ahead", c.pipeline_receive_ahead);
}

// The command-line flag that sets a setting, so the message says both ways to fix it.
std::string label(const std::string& name) {
  static const std::map<std::string, std::string> flags = {
      {"gradient_accumulation_steps", "--micro-batches"},
      {"tierzero.steps", "--steps"},
      {"tierzero.seed", "--seed"},
      {"tierzero.device", "--device"},
      {"tierzero.val_batches", "--batches"},
      {"tierzero.load_checkpoint", "--load"},
      {"tierzero.save_checkpoint", "--save"},
      {"tierzero.checkpoint.save_dir", "--save-dir"},
      {"tierzero.checkpoint.save_every", "--save-every"},
      {"tierzero.checkpoint.keep_last", "--keep-last"},
      {"tierzero.checkpoint.resume", "--resume"},
      {"tierzero.offload_gradients", "--offload-grads"},
      {"tierzero.optimizer_overlap", "--optimizer-overlap"},
      {"tierzero.tensor_parallel", "--tp"},
      {"tierzero.sequence_parallel", "--sequence-parallel"},
      {"tierzero.ulysses_parallel", "--ulysses"},
      {"tierzero.pipeline_parallel", "--pp"},
      {"tierzero.pipeline_schedule", "--pipeline-schedule"},
      {"tierzero.pipeline_virtual_stages", "--virtual-stages"},
      {"tierzero.pipeline_stages", "--pipeline-stages"}};
  if (name.rfind("tierzero.model.", 0) == 0) return name + " (--model)";
  if (name.rfind("tierzero.train_data", 0) == 0) return name + " (--data)";
  if (name.rfind("tierzero.val_data", 0) == 0) return name + " (--val-data)";
  const auto it = flags.find(name);
  return it == flags.end() ? name : name + " (" + it->second + ")";
}

// A value as a message shows it: long ones cut (a setting's values rarely run this long).
std::string shown(const std::string& value) {
  constexpr size_t kMax = 200;
  return value.size() <= kMax ? value : value.substr(0, kMax) + "...";
}

}  // namespace

RunSettings run_settings(const TrainConfig& c) {
  SettingsBuilder s;
  s.add("tierzero build", build_identity());
  add_deepspeed_keys(s, c);
  add_zero_keys(s, c.zero);
  add_tierzero_keys(s, c);
  return s.take();
}

std::string settings_text(const RunSettings& settings) {
  std::string text;
  for (const RunSetting& s : settings) {
    text += s.name;
    text += '\0';
    text += s.value;
    text += '\0';
  }
  return text;
}

RunSettings parse_settings_text(const std::string& text) {
  std::vector<std::string> fields;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\0', at);
    TZ_CHECK(end != std::string::npos, "a run's settings text does not end with a NUL",
             "internal error: the ranks exchanged a cut settings list");
    fields.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  TZ_CHECK(fields.size() % 2 == 0, "a run's settings text holds a name without a value",
           "internal error: the ranks exchanged a cut settings list");
  RunSettings settings;
  for (size_t i = 0; i < fields.size(); i += 2) settings.push_back({fields[i], fields[i + 1]});
  return settings;
}

uint64_t settings_digest(const std::string& text) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a offset basis
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;  // FNV prime
  }
  return h;
}

std::optional<size_t> first_difference(const RunSettings& reference, const RunSettings& other) {
  const size_t common = std::min(reference.size(), other.size());
  for (size_t i = 0; i < common; ++i)
    if (!(reference[i] == other[i])) return i;
  if (reference.size() != other.size()) return common;
  return std::nullopt;
}

std::string describe_difference(const RunSettings& reference, int reference_rank,
                                const RunSettings& other, int other_rank, size_t index) {
  const std::string on_ref = " on rank " + std::to_string(reference_rank);
  const std::string on_other = " on rank " + std::to_string(other_rank);
  if (index >= reference.size() && index >= other.size()) return "the settings are equal";
  if (index >= other.size())
    return label(reference[index].name) + " is " + shown(reference[index].value) + on_ref +
           " but not set" + on_other + " (another tierzero build?)";
  if (index >= reference.size())
    return label(other[index].name) + " is " + shown(other[index].value) + on_other +
           " but not set" + on_ref + " (another tierzero build?)";
  const RunSetting& a = reference[index];
  const RunSetting& b = other[index];
  if (a.name != b.name)
    return "rank " + std::to_string(reference_rank) + " has the setting " + a.name +
           " where rank " + std::to_string(other_rank) + " has " + b.name +
           " (another tierzero build?)";
  return label(a.name) + " is " + shown(a.value) + on_ref + " but " + shown(b.value) + on_other;
}

}  // namespace tierzero::train
