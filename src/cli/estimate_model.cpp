// Model and layout flags of `estimate` and `plan`, and the GPT's units and activation bytes.
#include "estimate_model.hpp"

#include <algorithm>
#include <cstdio>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/nn/pipeline_schedule.hpp"
#include "tierzero/nn/pipeline_stage.hpp"
#include "tierzero/nn/tensor_parallel_group.hpp"
#include "tierzero/nn/ulysses_group.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/pipeline_executor.hpp"
#include "tierzero/train/store_provider.hpp"

namespace tierzero::cli {

void add_model_options(CLI::App& app, ModelFlags& f) {
  app.add_option("--model", f.model, "preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl");
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
  if (!f.model.empty())
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

size_t nvme_bounce_bytes(const train::AioConfig& aio) {
  return static_cast<size_t>(aio.queue_depth) *
         offload::HostPool::round_size(static_cast<size_t>(aio.block_size));
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
                                        size_t tp, size_t pp, const PipelineFlags& pipeline) {
  // The rank with the most elements is the one that must fit.
  std::vector<zero::UnitSpec> worst;
  size_t worst_elems = 0;
  for (const std::vector<nn::PipelineStage>& chunks :
       rank_chunks(config, pp, pipeline.virtual_stages, pipeline.blocks_per_stage)) {
    std::vector<zero::UnitSpec> units = train::units_from_layout(
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

size_t activation_bytes(const nn::GPTConfig& config, size_t B, size_t T, bool checkpointing,
                        const profile::WorldLayout& world, bool sequence_parallel,
                        const PipelineFlags& pipeline) {
  return activation_estimate_for(config, B, T, checkpointing, world, sequence_parallel, pipeline,
                                 Tier::device, 2)
      .activation_bytes;
}

train::ActivationEstimate activation_estimate_for(const nn::GPTConfig& config, size_t B, size_t T,
                                                  bool checkpointing,
                                                  const profile::WorldLayout& world,
                                                  bool sequence_parallel,
                                                  const PipelineFlags& pipeline, Tier tier,
                                                  size_t device_slots) {
  const auto pp = static_cast<size_t>(world.pp), sp = static_cast<size_t>(world.sp);
  const auto tp = static_cast<size_t>(world.tp);
  const nn::ActivationDims dims = nn::ActivationDims::of(config, B, T, tp, sequence_parallel, sp);
  const nn::PipelineSchedule schedule = nn::pipeline_schedule_from_name(pipeline.schedule);
  if (pp == 1)
    return train::activation_estimate(config, dims, {}, schedule, 1, checkpointing, tier,
                                      device_slots);
  // Each rank holds its chunks' activations for as many micro-batches as the schedule keeps in
  // flight there; the largest is the rank that must fit.
  const size_t m = pipeline.micro_batches > 0 ? pipeline.micro_batches : pp;
  train::ActivationEstimate worst;
  size_t worst_device = 0, stored_most = 0;
  for (const std::vector<nn::PipelineStage>& chunks :
       rank_chunks(config, pp, pipeline.virtual_stages, pipeline.blocks_per_stage)) {
    train::ActivationEstimate a = train::activation_estimate(config, dims, chunks, schedule, m,
                                                             checkpointing, tier, device_slots);
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
                                  bool checkpointing, const profile::WorldLayout& world,
                                  bool sequence_parallel) {
  const auto tp = static_cast<size_t>(world.tp);
  if (tp == 1) return 0.0;
  const auto pp = static_cast<size_t>(world.pp);
  const size_t layers = (config.num_layers + pp - 1) / pp;
  const nn::TensorParallelTraffic t = nn::expected_tensor_parallel_traffic(
      layers, nn::ActivationDims::of(config, B, T, tp, sequence_parallel), checkpointing);
  const double ring = static_cast<double>(tp - 1) / static_cast<double>(tp);
  return ring * (2.0 * static_cast<double>(t.all_reduce_bytes) +
                 static_cast<double>(t.all_gather_bytes + t.reduce_scatter_bytes));
}

double ulysses_wire_bytes(const nn::GPTConfig& config, size_t B, size_t T, bool checkpointing,
                          const profile::WorldLayout& world) {
  const auto sp = static_cast<size_t>(world.sp);
  if (sp == 1) return 0.0;
  const nn::UlyssesTraffic t = nn::expected_ulysses_traffic(
      config.num_layers,
      nn::ActivationDims::of(config, B, T, static_cast<size_t>(world.tp), false, sp),
      checkpointing);
  // Each all-to-all keeps one of its sp blocks on the rank.
  return static_cast<double>(t.all_to_all_bytes) * static_cast<double>(sp - 1) /
         static_cast<double>(sp);
}

void add_run_options(CLI::App& app, RunFlags& f) {
  app.add_option("--config", f.config,
                 "DeepSpeed-style JSON config to take the model, stage, offload and batch from");
  app.add_option("--stage", f.stage, "ZeRO stage 0-3")->check(CLI::Range(0, 3));
  app.add_option("--offload-param", f.offload_param, "none, cpu or nvme (stage 3)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-param-ratio", f.offload_param_ratio,
                 "fraction of units whose parameters are offloaded")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--offload-optimizer", f.offload_optimizer, "none, cpu or nvme (stage >= 1)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_option("--offload-optimizer-ratio", f.offload_optimizer_ratio,
                 "fraction of units whose optimizer states are offloaded")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--micro-batch", f.micro_batch, "sequences per rank per micro-step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--seq", f.seq, "tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_flag("--checkpointing", f.checkpointing, "activation checkpointing per block");
  app.add_option("--activation-offload", f.activation_offload,
                 "where the block checkpoints live: device, host (cpu) or nvme (implies "
                 "--checkpointing unless device)")
      ->check(CLI::IsMember({"device", "host", "cpu", "nvme"}));
}

namespace {

std::string offload_desc(const std::string& device, double ratio) {
  if (device == "none") return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (ratio %g)", device.c_str(), ratio);
  return buf;
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
  if (run.offload_optimizer_ratio >= 0) z.offload_optimizer.ratio = run.offload_optimizer_ratio;
  const double param_ratio =
      run.offload_param_ratio >= 0 ? run.offload_param_ratio : z.offload_param.ratio;
  s.model = resolve_model(model, have_config ? &c : nullptr);
  s.micro_batch = static_cast<size_t>(run.micro_batch > 0 ? run.micro_batch : c.micro_batch_size);
  s.seq_len = static_cast<size_t>(run.seq > 0   ? run.seq
                                  : have_config ? c.seq_len
                                                : static_cast<int64_t>(s.model.max_seq_len));
  TZ_CHECK(s.seq_len <= s.model.max_seq_len,
           "sequence length " + std::to_string(s.seq_len) + " exceeds the model's context " +
               std::to_string(s.model.max_seq_len),
           "lower --seq or raise --context");
  s.checkpointing = run.checkpointing || c.activation_checkpointing;

  const profile::WorldLayout w = resolve_world(world, have_config ? &c : nullptr);
  s.sequence_parallel = world.sequence_parallel || (have_config && c.sequence_parallel);
  PipelineFlags pipeline;
  pipeline.schedule = c.pipeline_schedule;
  pipeline.micro_batches = static_cast<size_t>(c.gradient_accumulation_steps);
  if (w.pp == c.pipeline_parallel) {  // the config's pipeline: its chunks and its cut
    pipeline.virtual_stages = static_cast<size_t>(c.pipeline_virtual_stages);
    for (int64_t b : c.pipeline_stages) pipeline.blocks_per_stage.push_back(static_cast<size_t>(b));
  } else if (pipeline.schedule == "interleaved") {
    pipeline.schedule = "1f1b";  // --pp other than the config's: one chunk per rank
  }
  if (!run.activation_offload.empty())
    c.activation_checkpoints.device =
        run.activation_offload == "host" ? "cpu" : run.activation_offload;
  if (c.activation_checkpoints.device != "device" && !run.activation_offload.empty())
    s.checkpointing = true;
  const train::ActivationEstimate a = activation_estimate_for(
      s.model, s.micro_batch, s.seq_len, s.checkpointing, w, s.sequence_parallel, pipeline,
      train::checkpoint_tier_of(c.activation_checkpoints),
      static_cast<size_t>(c.activation_checkpoints.buffer_count));
  s.input = train::estimate_input_from(
      c,
      model_units(s.model, static_cast<size_t>(c.blocks_per_unit), static_cast<size_t>(w.tp),
                  static_cast<size_t>(w.pp), pipeline),
      w, a.activation_bytes);
  s.input.checkpoints = a.checkpoints;
  s.input.placement.param.ratio = param_ratio;
  s.param_desc = offload_desc(z.offload_param.device, param_ratio);
  s.optimizer_desc = offload_desc(z.offload_optimizer.device, z.offload_optimizer.ratio);
  return s;
}

}  // namespace tierzero::cli
