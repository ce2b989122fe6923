// Model, layout and run flags of `estimate` and `plan`, and the settings they resolve to.
#include "estimate_model.hpp"

#include <cstdio>
#include <filesystem>

#include "commands.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/estimate_inputs.hpp"
#include "tierzero/train/global_batch.hpp"
#include "tierzero/train/hf_directory.hpp"
#include "tierzero/train/placement_from_config.hpp"

namespace tierzero::cli {

void add_model_options(CLI::App& app, ModelFlags& f) {
  app.add_option("--model", f.model,
                 "preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.1-8b, "
                 "qwen2.5-0.5b, smollm-135m, llama-tiny");
  app.add_option("--hf-config", f.hf_config,
                 "a Hugging Face config.json (or the model directory holding it): its "
                 "architecture and shape, no weights needed")
      ->excludes("--model");
  app.add_option("--layers", f.layers, "transformer blocks (L)")->check(CLI::Range(1, 100000));
  app.add_option("--heads", f.heads, "attention heads")->check(CLI::Range(1, 100000));
  app.add_option("--channels", f.channels, "model width (C)")->check(CLI::Range(1, 1000000));
  app.add_option("--vocab", f.vocab, "vocabulary size (padded up to 128)")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--context", f.context, "context length (positions)")
      ->check(CLI::Range(1, 10000000));
}

void add_world_options(CLI::App& app, WorldFlags& f) {
  app.add_option("--ranks", f.ranks, "world size (default: dp * tp * pp * sp)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--dp", f.dp, "data-parallel ranks (default: ranks / (tp * pp * sp))")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--tp", f.tp, "tensor-parallel ranks (default: the config's, else 1)")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "Megatron sequence parallelism over the tensor-parallel ranks");
  app.add_option("--pp", f.pp, "pipeline stages (default: the config's, else 1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--sp,--ulysses", f.sp,
                 "Ulysses sequence-parallel ranks: each holds seq_len / sp positions of every "
                 "sequence (default: the config's tierzero.ulysses_parallel, else 1)")
      ->check(CLI::Range(1, 4096));
}

nn::GPTConfig resolve_model(const ModelFlags& f, const train::TrainConfig* config) {
  nn::GPTConfig c;
  if (!f.hf_config.empty())
    c = train::read_hf_config_file(
        std::filesystem::is_directory(f.hf_config) ? f.hf_config + "/config.json" : f.hf_config);
  else if (!f.model.empty())
    c = nn::GPTConfig::preset(f.model);
  else if (config)
    c = train::gpt_config_from(config->model);
  train::ModelShape s;
  s.n_layer = f.layers > 0 ? f.layers : static_cast<int64_t>(c.num_layers);
  s.n_head = f.heads > 0 ? f.heads : static_cast<int64_t>(c.num_heads);
  s.n_embd = f.channels > 0 ? f.channels : static_cast<int64_t>(c.channels);
  s.context_length = f.context > 0 ? f.context : static_cast<int64_t>(c.max_seq_len);
  s.vocab_size = f.vocab > 0 ? f.vocab : static_cast<int64_t>(c.vocab_size);
  s.padded_vocab_size = f.vocab > 0 ? 0 : static_cast<int64_t>(c.padded_vocab_size);
  s.arch = c.arch;  // a Llama-family preset or config keeps its architecture
  return train::gpt_config_from(s);
}

profile::WorldLayout resolve_world(const WorldFlags& f, const train::TrainConfig* config) {
  profile::WorldLayout w;
  const int64_t tp = f.tp > 0 ? f.tp : config ? config->tensor_parallel : 1;
  const int64_t pp = f.pp > 0 ? f.pp : config ? config->pipeline_parallel : 1;
  w.tp = static_cast<int>(tp);
  w.pp = static_cast<int>(pp);
  const int64_t sp = f.sp > 0 ? f.sp : config ? config->ulysses_parallel : 1;
  // As the trainer (and nn::ActivationDims, for tp): Ulysses runs beside dp and ZeRO only.
  TZ_CHECK(sp == 1 || pp == 1,
           "Ulysses (--sp " + std::to_string(sp) + ") with pipeline parallelism (--pp " +
               std::to_string(pp) + ") is not supported",
           "estimate Ulysses without --pp, or pipeline parallelism without --sp");
  w.sp = static_cast<int>(sp);
  const int64_t model_parallel = tp * pp * sp;
  if (f.dp > 0) {
    w.dp = static_cast<int>(f.dp);
    TZ_CHECK(f.ranks == 0 || f.ranks == f.dp * model_parallel,
             "--ranks " + std::to_string(f.ranks) +
                 " is not dp * tp * pp * sp = " + std::to_string(f.dp * model_parallel),
             "give --ranks or --dp, or make them agree");
  } else {
    const int64_t ranks = f.ranks > 0 ? f.ranks : model_parallel;
    TZ_CHECK(ranks % model_parallel == 0,
             "--ranks " + std::to_string(ranks) +
                 " is not a multiple of tp * pp * sp = " + std::to_string(model_parallel),
             "choose ranks = dp * tp * pp * sp");
    w.dp = static_cast<int>(ranks / model_parallel);
  }
  return w;
}

void add_run_options(CLI::App& app, RunFlags& f) {
  app.add_option("--config", f.config,
                 "DeepSpeed-style JSON config to take the model, stage, offload and batch from");
  app.add_option("--stage", f.stage, "ZeRO stage 0-3")->check(CLI::Range(0, 3));
  app.add_option("--offload-param", f.offload_param, "none, cpu or nvme (stage 3)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-param-ratio", f.offload_param_ratio,
                 "fraction of units whose parameters are offloaded")
      ->check(finite_in(0.0, 1.0));
  app.add_option("--offload-optimizer", f.offload_optimizer, "none, cpu or nvme (stage >= 1)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-optimizer-ratio", f.offload_optimizer_ratio,
                 "fraction of units whose optimizer states are offloaded")
      ->check(finite_in(0.0, 1.0));
  app.add_option("--micro-batch", f.micro_batch, "sequences per rank per micro-step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--seq", f.seq, "tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_flag("--checkpointing", f.checkpointing, "activation checkpointing per block");
  app.add_option("--recompute", f.recompute,
                 "what a block's backward recomputes: none, selective (the attention's core) or "
                 "full (= --checkpointing); default: the config's tierzero.recompute")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  app.add_option("--activation-offload", f.activation_offload,
                 "where the block checkpoints live: device, host (cpu) or nvme (implies "
                 "--checkpointing unless device)")
      ->check(CLI::IsMember({"device", "host", "cpu", "nvme"}));
  app.add_option("--precision", f.precision,
                 "the working parameters' type: fp32, bf16 or fp16 (default: the config's, else "
                 "fp32); a config's 16-bit compute_dtype follows it")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--device", f.device,
                 "cpu, cuda or cuda:N: the run's device, whose compute dtype the activations are "
                 "counted in (16-bit on CUDA with 16-bit parameters; default: the config's, else "
                 "cpu)");
}

namespace {

std::string offload_desc(const std::string& device, double ratio) {
  if (device == "none") return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (ratio %g)", device.c_str(), ratio);
  return buf;
}

// The estimator counts bytes in 64 bits. A model whose state (parameters, gradients, AdamW's
// two moments and a working copy: 20 bytes a parameter) or one micro-batch's activations (a
// generous 64 bytes per token and channel per block, and the fp32 logits) pass 2^62 bytes
// (4 EiB) is refused here rather than summed into a wrapped total.
void check_countable(const nn::GPTConfig& m, size_t micro_batch, size_t seq_len) {
  using Real = long double;
  const Real L = static_cast<Real>(m.num_layers), C = static_cast<Real>(m.channels);
  const Real V = static_cast<Real>(m.padded_vocab_size), T = static_cast<Real>(m.max_seq_len);
  const Real tokens = static_cast<Real>(micro_batch) * static_cast<Real>(seq_len);
  const Real state = 20 * (L * 13 * C * C + (V + T) * C);
  const Real activations = tokens * (64 * C * L + 4 * V);
  const Real most = static_cast<Real>(uint64_t{1} << 62);
  TZ_CHECK(state <= most && activations <= most,
           "the model and batch are beyond what the estimate counts: about " +
               std::to_string(static_cast<double>(state)) + " bytes of model state and " +
               std::to_string(static_cast<double>(activations)) +
               " of activations, past 2^62 (4 EiB)",
           "give a smaller model, --micro-batch or --seq");
}

}  // namespace

EstimateSettings resolve_settings(const ModelFlags& model, const WorldFlags& world,
                                  const RunFlags& run) {
  EstimateSettings s;
  const bool have_config = !run.config.empty();
  s.config = have_config ? train::TrainConfig::load(run.config) : train::TrainConfig::defaults();
  train::TrainConfig& c = s.config;
  train::ZeroConfig& z = c.zero;
  if (run.stage >= 0) z.stage = run.stage;
  if (!run.offload_param.empty()) z.offload_param.device = run.offload_param;
  if (!run.offload_optimizer.empty()) z.offload_optimizer.device = run.offload_optimizer;
  if (run.offload_param_ratio >= 0) z.offload_param.ratio = run.offload_param_ratio;
  if (run.offload_optimizer_ratio >= 0) z.offload_optimizer.ratio = run.offload_optimizer_ratio;
  if (!run.precision.empty()) train::set_precision(c, run.precision);
  if (!run.device.empty()) {
    train::device_kind_of(run.device);  // an Error for a name that is no device
    c.device = run.device;
  }
  s.model = resolve_model(model, have_config ? &c : nullptr);
  const profile::WorldLayout w = resolve_world(world, have_config ? &c : nullptr);
  // A config's train_batch_size sets its micro-batch and accumulation as in training; a
  // --micro-batch given here replaces the config's batch.
  if (run.micro_batch <= 0) train::resolve_global_batch(c, w.dp);
  s.micro_batch = static_cast<size_t>(run.micro_batch > 0 ? run.micro_batch : c.micro_batch_size);
  s.seq_len = static_cast<size_t>(run.seq > 0   ? run.seq
                                  : have_config ? c.seq_len
                                                : static_cast<int64_t>(s.model.max_seq_len));
  TZ_CHECK(s.seq_len <= s.model.max_seq_len,
           "sequence length " + std::to_string(s.seq_len) + " exceeds the model's context " +
               std::to_string(s.model.max_seq_len),
           "lower --seq or raise --context");
  check_countable(s.model, s.micro_batch, s.seq_len);
  TZ_CHECK(!(run.checkpointing && !run.recompute.empty() && run.recompute != "full"),
           "--checkpointing (full recompute) with --recompute " + run.recompute,
           "give one of them");
  s.recompute = !run.recompute.empty() ? nn::Recompute::parse(run.recompute, "--recompute")
                : run.checkpointing    ? nn::Recompute(nn::Recompute::full)
                                       : nn::Recompute::parse(c.recompute, "tierzero.recompute");
  s.checkpointing = s.recompute.is_full();

  s.sequence_parallel = world.sequence_parallel || (have_config && c.sequence_parallel);
  if (!run.activation_offload.empty()) {
    // As train reads it (the Python binding's value too: it has no CLI check before it).
    const Tier tier = train::tier_from_name(run.activation_offload, "--activation-offload");
    c.activation_checkpoints.device =
        tier == Tier::device ? "device" : train::offload_device_name(tier);
    if (c.activation_checkpoints.device != "device") {
      TZ_CHECK(!s.recompute.is_selective(),
               "--activation-offload " + run.activation_offload + " with selective recompute",
               "activation checkpoints on a tier need full recompute (--recompute full)");
      s.recompute = nn::Recompute(nn::Recompute::full);
      s.checkpointing = true;
    }
  }
  s.input = train::run_estimate_input(c, s.model, w, s.micro_batch, s.seq_len, s.recompute,
                                      s.sequence_parallel);
  s.param_desc = offload_desc(z.offload_param.device, z.offload_param.ratio);
  s.optimizer_desc = offload_desc(z.offload_optimizer.device, z.offload_optimizer.ratio);
  return s;
}

}  // namespace tierzero::cli
