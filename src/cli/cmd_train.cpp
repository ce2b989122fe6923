// `tierzero train` and `tierzero eval`: a config file (DeepSpeed keys + a "tierzero" section) with
// command-line flags on top.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/placement_from_config.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/train/trainer.hpp"

namespace tierzero::cli {

namespace {

struct TrainFlags {
  std::string config;
  int64_t steps = -1;
  int64_t seed = -1;
  std::string data, val_data, device, load, save, log_level, metrics, memory_json, profile;
  bool profile_timeline = false;
  int64_t threads = -1;
  size_t device_mem = 0;  // bytes; 0: from the config
  size_t host_mem = 0;
  int64_t batches = -1;
  int64_t tensor_parallel = 0;  // 0: from the config
  bool sequence_parallel = false;
  bool tf32 = false;
  std::string compute_dtype;  // auto, fp32, bf16, fp16; empty: the config's
  int64_t ulysses = 0;        // 0: from the config
  std::string save_dir, resume;
  bool reset_lr_schedule = false;
  std::string recompute;                    // none, selective, full; empty: the config's
  int64_t save_every = -1, keep_last = -1;  // -1: from the config
  int64_t pipeline_parallel = 0;            // 0: from the config
  std::string pipeline_schedule;            // empty: from the config
  int64_t micro_batches = 0;                // gradient_accumulation_steps; 0: from the config
  int64_t virtual_stages = 0;               // pipeline_virtual_stages; 0: from the config
  std::vector<int64_t> pipeline_stages;
  std::string model;              // a preset or "layers,heads,channels"; empty: from the config
  std::string offload_grads;      // cpu or nvme; empty: from the config
  std::string optimizer_overlap;  // off, plain or speculative; empty: from the config
  int64_t stage = -1;             // zero_optimization.stage; -1: from the config
  double lr = -1.0;               // optimizer.params.lr; < 0: from the config
  int64_t micro_batch = 0;        // train_micro_batch_size_per_gpu; 0: from the config
  std::string offload_param, offload_optimizer;  // none, cpu (host) or nvme; empty: the config's
  std::string nvme_path;                         // both offloads' nvme_path; empty: the config's
  std::string activation_offload;                // device, host (cpu) or nvme; empty: the config's
};

// The placement names the flags accept: DeepSpeed's (none, cpu, nvme), and host for cpu; the
// config takes DeepSpeed's.
std::string offload_device(const std::string& flag, const char* option) {
  return train::offload_device_name(train::tier_from_name(flag, option));
}

void add_common(CLI::App* sub, TrainFlags& f) {
  sub->add_option("--config", f.config, "JSON config (DeepSpeed keys + a \"tierzero\" section)");
  sub->add_option("--data", f.data, "glob of llm.c token shards (default: the built-in corpus)");
  sub->add_option("--val-data", f.val_data, "glob of validation shards");
  sub->add_option("--device", f.device, "cpu, cuda or cuda:N");
  sub->add_option("--threads", f.threads, "CPU threads (default: all)")->check(CLI::Range(1, 4096));
  sub->add_option("--model", f.model,
                  "gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.1-8b, "
                  "qwen2.5-0.5b, smollm-135m, llama-tiny, or a custom layers,heads,channels "
                  "(e.g. 48,25,1600)");
  sub->add_option("--load", f.load, "llm.c model checkpoint (version 3, fp32) to start from");
  sub->add_option("--log-level", f.log_level, "debug, info, warn, error or off");
  sub->add_flag("--tf32", f.tf32,
                "fp32 products on CUDA in TF32 on the tensor cores (tierzero.tf32); the CPU "
                "stays fp32");
  sub->add_option("--compute-dtype", f.compute_dtype,
                  "what the products and their activations run in with bf16 or fp16 working "
                  "parameters (tierzero.compute_dtype): auto (16-bit on CUDA where built), fp32, "
                  "or the working type")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  sub->add_option("--device-mem", f.device_mem,
                  "device memory budget, e.g. 24GiB or 36MiB: a hard limit (on the CPU backend "
                  "the compute arena's budget, so an offloaded run behaves as on a GPU of that "
                  "size)")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option(
         "--host-mem", f.host_mem,
         "pinned host memory budget for offloaded state and staging, per node (its ranks share "
         "it equally), e.g. 64GiB; default 80% of RAM")
      ->transform(CLI::AsSizeValue(false));
  sub->add_option("--tp", f.tensor_parallel,
                  "tensor-parallel ranks (Megatron): split heads, MLP and vocabulary; the world "
                  "is dp x tp")
      ->check(CLI::Range(1, 4096));
  sub->add_flag("--sequence-parallel", f.sequence_parallel,
                "Megatron sequence parallelism over the tensor-parallel ranks");
  sub->add_option("--ulysses", f.ulysses,
                  "Ulysses sequence-parallel ranks (DeepSpeed-Ulysses): each holds a slice of "
                  "every sequence, all-to-all around the attention; the world is dp x ulysses")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--pp", f.pipeline_parallel,
                  "pipeline stages: the blocks are cut into pp stages; the world is dp x tp x pp")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--pipeline-schedule", f.pipeline_schedule,
                  "gpipe, 1f1b (the default) or interleaved (with --virtual-stages): the order "
                  "of the micro-batches' forwards and backwards on each stage")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  sub->add_option("--virtual-stages", f.virtual_stages,
                  "model chunks per pipeline rank for the interleaved schedule (rank s runs "
                  "virtual stages s, s + pp, ...)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--micro-batches", f.micro_batches,
                  "micro-batches per step (gradient_accumulation_steps); the pipeline's m")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--pipeline-stages", f.pipeline_stages,
                  "blocks per (virtual) stage, e.g. 3,3,2 (default: balanced by parameters)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--stage", f.stage, "ZeRO stage 0-3 (zero_optimization.stage)")
      ->check(CLI::Range(0, 3));
  sub->add_option("--micro-batch", f.micro_batch,
                  "sequences per rank per micro-step (train_micro_batch_size_per_gpu)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--offload-param,--offload-params", f.offload_param,
                  "where parameter shards live: none (device), host (cpu) or nvme "
                  "(zero_optimization.offload_param.device; stage 3)")
      ->check(CLI::IsMember({"none", "host", "cpu", "nvme"}));
  sub->add_option("--nvme-path", f.nvme_path,
                  "directory on the NVMe drive for the swap files of offload_param and "
                  "offload_optimizer (their nvme_path)");
  sub->add_option("--activation-offload", f.activation_offload,
                  "where the block checkpoints live between forward and backward: device, host "
                  "(cpu) or nvme (tierzero.activation_checkpoints.device; host and nvme turn "
                  "activation checkpointing on; nvme uses --nvme-path)")
      ->check(CLI::IsMember({"device", "host", "cpu", "nvme"}));
}

// What only training uses: the optimizer's settings and placement, and checkpoints.
void add_training_only(CLI::App* sub, TrainFlags& f) {
  sub->add_option("--lr", f.lr, "peak learning rate (optimizer.params.lr)")
      ->check(finite_in(0.0, 10.0));
  sub->add_option("--offload-optimizer", f.offload_optimizer,
                  "where optimizer states live: none (device), host (cpu) or nvme "
                  "(zero_optimization.offload_optimizer.device; stages 1-3)")
      ->check(CLI::IsMember({"none", "host", "cpu", "nvme"}));
  sub->add_option("--offload-grads", f.offload_grads,
                  "where gradient shards live when the optimizer is on NVMe: cpu or nvme "
                  "(stages 2-3)")
      ->check(CLI::IsMember({"cpu", "nvme"}));
  sub->add_option("--optimizer-overlap", f.optimizer_overlap,
                  "plain (the default): the CPU optimizer updates each unit during the backward "
                  "once its gradient shard is final, on steps without clipping or fp16 loss "
                  "scaling (with them: only the unit's share of the gradient norm); speculative: "
                  "on those steps too, as if clipping did not bind, undone and redone at the step "
                  "when it does (or fp16 overflows); off: after the backward "
                  "(tierzero.optimizer_overlap)")
      ->check(CLI::IsMember({"off", "plain", "speculative"}));
  sub->add_option("--save-dir", f.save_dir,
                  "write training checkpoints (every rank its shards) under this directory");
  sub->add_option("--save-every", f.save_every,
                  "steps between checkpoints (0: only at the end and on SIGTERM/SIGINT)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--keep-last", f.keep_last, "checkpoints kept in --save-dir (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  // (--load beside it, or --reset-lr-schedule without it: check_supported, which sees the config
  // too.)
  sub->add_option("--resume", f.resume,
                  "resume from a checkpoint: a step directory, or a --save-dir (its latest); its "
                  "learning-rate schedule is kept unless --reset-lr-schedule");
  sub->add_option("--recompute", f.recompute,
                  "what a block's backward recomputes: none, selective (the attention's core) or "
                  "full (activation checkpointing); default: the config's tierzero.recompute")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  sub->add_flag("--reset-lr-schedule", f.reset_lr_schedule,
                "with --resume: follow the schedule of this run's --steps (and config) instead "
                "of the checkpoint's");
}

train::TrainConfig resolve(const TrainFlags& f) {
  train::TrainConfig c =
      f.config.empty() ? train::TrainConfig::defaults() : train::TrainConfig::load(f.config);
  if (f.steps >= 0) c.steps = f.steps;
  if (f.seed >= 0) c.seed = static_cast<uint64_t>(f.seed);
  if (!f.data.empty()) c.train_data = f.data;
  if (!f.val_data.empty()) c.val_data = f.val_data;
  if (!f.device.empty()) c.device = f.device;
  if (f.threads > 0) c.threads = f.threads;
  if (!f.load.empty()) c.load_checkpoint = f.load;
  if (!f.save.empty()) c.save_checkpoint = f.save;
  if (!f.log_level.empty()) c.log_level = f.log_level;
  if (f.batches >= 0) c.val_batches = f.batches;
  if (f.tensor_parallel > 0) c.tensor_parallel = f.tensor_parallel;
  if (f.sequence_parallel) c.sequence_parallel = true;
  if (f.tf32) c.tf32 = true;
  if (!f.compute_dtype.empty()) c.compute_dtype = f.compute_dtype;
  if (f.ulysses > 0) c.ulysses_parallel = f.ulysses;
  if (!f.save_dir.empty()) c.checkpoint.save_dir = f.save_dir;
  if (f.save_every >= 0) c.checkpoint.save_every = f.save_every;
  if (f.keep_last >= 0) c.checkpoint.keep_last = f.keep_last;
  if (!f.resume.empty()) c.checkpoint.resume = f.resume;
  if (f.pipeline_parallel > 0) c.pipeline_parallel = f.pipeline_parallel;
  if (!f.pipeline_schedule.empty()) c.pipeline_schedule = f.pipeline_schedule;
  if (f.micro_batches > 0) c.gradient_accumulation_steps = f.micro_batches;
  if (f.virtual_stages > 0) c.pipeline_virtual_stages = f.virtual_stages;
  if (!f.pipeline_stages.empty()) c.pipeline_stages = f.pipeline_stages;
  if (f.device_mem > 0)
    c.device_memory_budget_gb = static_cast<double>(f.device_mem) / 1073741824.0;
  if (f.host_mem > 0) c.host_memory_budget_gb = static_cast<double>(f.host_mem) / 1073741824.0;
  if (!f.model.empty()) train::apply_model_name(f.model, c.model);
  if (!f.offload_grads.empty()) c.offload_gradients = f.offload_grads;
  if (!f.optimizer_overlap.empty()) c.optimizer_overlap = f.optimizer_overlap;
  if (f.stage >= 0) c.zero.stage = f.stage;
  if (f.lr >= 0.0) {
    c.optimizer.lr = f.lr;
    if (c.scheduler.warmup_max_lr >= 0.0) c.scheduler.warmup_max_lr = f.lr;  // WarmupLR's peak
  }
  if (f.micro_batch > 0) c.micro_batch_size = f.micro_batch;
  // A config's train_batch_size no longer matches a changed batch: derived from the parts again.
  if (f.micro_batch > 0 || f.micro_batches > 0) c.train_batch_size = 0;
  if (!f.offload_param.empty())
    c.zero.offload_param.device = offload_device(f.offload_param, "--offload-param");
  if (!f.offload_optimizer.empty())
    c.zero.offload_optimizer.device = offload_device(f.offload_optimizer, "--offload-optimizer");
  if (!f.nvme_path.empty()) {
    c.zero.offload_param.nvme_path = f.nvme_path;
    c.zero.offload_optimizer.nvme_path = f.nvme_path;
  }
  if (!f.recompute.empty()) {  // overrides the config's recompute and activation_checkpointing
    c.recompute = f.recompute;
    c.activation_checkpointing = f.recompute == "full";
  }
  if (!f.activation_offload.empty()) {
    const Tier tier = train::tier_from_name(f.activation_offload, "--activation-offload");
    c.activation_checkpoints.device =
        tier == Tier::device ? "device" : train::offload_device_name(tier);
    if (c.activation_checkpoints.device != "device") {  // checkpoints there need full recompute
      if (c.recompute == "selective")
        TZ_THROW("--activation-offload " + f.activation_offload + " with selective recompute",
                 "block checkpoints on a tier need full recompute: --recompute full");
      c.recompute = "full";
      c.activation_checkpointing = true;
    }
  }
  if (!f.nvme_path.empty()) c.activation_checkpoints.nvme_path = f.nvme_path;
  if (c.activation_checkpoints.device == "nvme" && c.activation_checkpoints.nvme_path.empty())
    TZ_THROW("--activation-offload nvme needs a directory",
             "pass --nvme-path (or tierzero.activation_checkpoints.nvme_path)");
  if (f.reset_lr_schedule) c.checkpoint.reset_lr_schedule = true;
  return c;
}

// `eval`: the mean validation loss of the model; rank 0 prints it.
int evaluate(const TrainFlags& f) {
  train::TrainConfig c = resolve(f);
  c.steps = 0;
  // Eval takes no step, so a config's train_batch_size (written for its training world) matters
  // only where it sets the micro-batch.
  if (c.micro_batch_given) c.train_batch_size = 0;
  if (c.val_data.empty()) c.val_data = c.train_data;
  train::Trainer trainer(c);
  train::TrainResult r = trainer.run(nullptr);
  if (r.rank != 0) return std::isfinite(r.val_loss) ? 0 : 1;  // rank 0 reports
  // nlohmann::json writes a non-finite loss as null, so the line stays valid JSON.
  const nlohmann::ordered_json line = {{"eval_loss", r.val_loss}, {"batches", r.val_batches}};
  std::printf("%s\n", line.dump().c_str());
  std::fprintf(stderr, "eval loss %.4f over %zu batches\n", r.val_loss, r.val_batches);
  // Past its end the data would repeat: the batches it holds are all there is to average.
  if (r.val_batches < static_cast<size_t>(c.val_batches))
    std::fprintf(stderr, "(the data holds %zu batches of %lld x %lld tokens; %lld were asked)\n",
                 r.val_batches, static_cast<long long>(c.micro_batch_size),
                 static_cast<long long>(c.seq_len), static_cast<long long>(c.val_batches));
  return std::isfinite(r.val_loss) ? 0 : 1;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* sub =
      app.add_subcommand("train", "train a GPT (defaults: a small GPT on the built-in corpus)");
  add_common(sub, *flags);
  add_training_only(sub, *flags);
  // whole_in, not CLI::NonNegativeNumber: that one parses as a double, so "abc" was "not in range
  // 0 to 1.79e308" (printed in full) rather than not a whole number.
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();  // the config's limits
  sub->add_option("--steps", flags->steps, "optimizer steps")->check(whole_in(0, kMost));
  sub->add_option("--seed", flags->seed, "seed of the initial weights")->check(whole_in(0, kMost));
  sub->add_option("--save", flags->save, "write an llm.c checkpoint at the end");
  sub->add_option(
      "--metrics", flags->metrics,
      "write one JSON line per step to this file (step, loss, lr, grad_norm, ms, "
      "tokens_per_s, prefetch_hits, on_demand_fetches, stall_ms, cpu_ms: the process's CPU "
      "time in the step; full precision)");
  sub->add_option("--memory-json", flags->memory_json,
                  "write each rank's tracked bytes per tier and category (current and peak) at "
                  "the end to this file (ranks > 0: <file>.rank<r>)");
  sub->add_option("--profile", flags->profile,
                  "write a run profile (JSON) here at the end, for `tierzero report` (ranks > 0: "
                  "<file>.rank<r>)");
  sub->add_flag("--profile-timeline", flags->profile_timeline,
                "keep every memory event and activity in the profile (for `report --trace`)");
  return {sub, [flags] {
            train::Trainer trainer(resolve(*flags));
            if (!flags->profile.empty())
              trainer.set_profile(flags->profile, flags->profile_timeline);
            trainer.run(stderr, flags->metrics, flags->memory_json);
            return 0;
          }};
}

Command add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* sub = app.add_subcommand("eval", "mean loss of a model (e.g. a checkpoint) on data");
  add_common(sub, *flags);
  sub->add_option("--batches", flags->batches, "batches to evaluate")
      ->check(CLI::Range(1, 1 << 30));
  return {sub, [flags] { return evaluate(*flags); }};
}

}  // namespace tierzero::cli
