// The training loop. Two paths share it: the one-rank fp32 reference (LocalParams + AdamW, used
// when not under MPI and at stage 0; every other mode is compared with it), and the ZeRO path
// (stages 0-3 on the device tier, one rank or many under mpiexec), where the GPT runs on the
// partition store through StoreParamProvider and the store runs the optimizer.
#include "tierzero/train/trainer.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "tierzero/comm/mesh.hpp"
#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/comm/nccl_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/tensor_parallel_params.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/profile/profile_recorder.hpp"
#include "tierzero/profile/rank_profiles.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/checkpoint_save_dir.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/loss_scaler.hpp"
#include "tierzero/train/lr_schedule.hpp"
#include "tierzero/train/pipeline_executor.hpp"
#include "tierzero/train/profiling_provider.hpp"
#include "tierzero/train/progress.hpp"
#include "tierzero/train/run_identity.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/step_metrics.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/synthetic_corpus.hpp"
#include "tierzero/train/training_checkpoint.hpp"
#include "tierzero/zero/comm_staging_pool.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kBuiltinCorpusTokens = 2000000;
constexpr size_t kBuiltinValTokens = 200000;

void check_supported(const TrainConfig& c) {
  TZ_CHECK(c.zero.stage >= 0 && c.zero.stage <= 3,
           "zero_optimization.stage " + std::to_string(c.zero.stage) + " does not exist",
           "use a stage from 0 to 3");
  if (c.zero.offload_optimizer.device != "none" && c.zero.stage == 0)
    TZ_THROW("zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)",
             "set zero_optimization.stage to 1 or more, or offload_optimizer.device to none");
  // Otherwise the setting would be ignored silently (no store, or no NVMe optimizer to read them).
  if (c.offload_gradients == "nvme")
    TZ_CHECK(c.zero.offload_optimizer.device == "nvme" && c.zero.stage >= 2,
             "tierzero.offload_gradients = nvme needs the optimizer on NVMe and ZeRO stage 2 or 3 "
             "(offload_optimizer.device is " +
                 c.zero.offload_optimizer.device + ", stage " + std::to_string(c.zero.stage) + ")",
             "set zero_optimization.offload_optimizer.device to nvme and stage to 2 or 3, or "
             "offload_gradients to cpu");
}

// The tensor- and pipeline-parallel split against the world and the model, before anything is
// allocated: every rank runs this on the same values, so all fail alike with the same message.
// Returns the pipeline's (virtual) stages: pipeline_parallel x pipeline_virtual_stages of them.
std::vector<nn::PipelineStage> check_parallel(const TrainConfig& c, const nn::GPTConfig& model,
                                              int world_size) {
  const auto tp = static_cast<size_t>(c.tensor_parallel);
  const auto pp = static_cast<size_t>(c.pipeline_parallel);
  const auto v = static_cast<size_t>(c.pipeline_virtual_stages);
  const auto u = static_cast<size_t>(c.ulysses_parallel);
  TZ_CHECK(static_cast<size_t>(world_size) % (tp * pp) == 0,
           "tierzero.tensor_parallel " + std::to_string(tp) + " x pipeline_parallel " +
               std::to_string(pp) + " does not divide the " + std::to_string(world_size) +
               " rank(s) of the job",
           "launch dp x tensor_parallel x pipeline_parallel ranks (mpiexec -n), or change them");
  TZ_CHECK(u == 1 || (tp == 1 && pp == 1),
           "tierzero.ulysses_parallel " + std::to_string(u) + " with tensor_parallel " +
               std::to_string(tp) + " and pipeline_parallel " + std::to_string(pp) +
               " is not supported: Ulysses combines with data parallelism and ZeRO only",
           "set tensor_parallel and pipeline_parallel to 1, or ulysses_parallel to 1");
  TZ_CHECK(static_cast<size_t>(world_size) % u == 0,
           "tierzero.ulysses_parallel " + std::to_string(u) + " does not divide the " +
               std::to_string(world_size) + " rank(s) of the job",
           "launch dp x ulysses_parallel ranks (mpiexec -n), or change ulysses_parallel");
  std::vector<size_t> blocks;
  for (int64_t b : c.pipeline_stages) blocks.push_back(static_cast<size_t>(b));
  const bool interleaved = c.pipeline_schedule == "interleaved";
  TZ_CHECK(v == 1 || interleaved,
           "tierzero.pipeline_virtual_stages " + std::to_string(v) +
               " needs pipeline_schedule "
               "interleaved (" +
               c.pipeline_schedule + " runs one model chunk per rank)",
           "set pipeline_schedule to interleaved, or pipeline_virtual_stages to 1");
  // (At pipeline_parallel 1 the schedule does nothing; virtual stages on one rank would hold the
  // embeddings and their tied copy twice.)
  TZ_CHECK(v == 1 || pp >= 2,
           "tierzero.pipeline_virtual_stages " + std::to_string(v) +
               " needs pipeline_parallel >= 2 (it is " + std::to_string(pp) + ")",
           "give pipeline_parallel 2 or more, or pipeline_virtual_stages 1");
  TZ_CHECK(v == 1 || pp * v <= model.num_layers,  // (at v 1 partition_pipeline says it)
           "pipeline_parallel " + std::to_string(pp) + " x pipeline_virtual_stages " +
               std::to_string(v) + " = " + std::to_string(pp * v) +
               " virtual stages exceed the model's " + std::to_string(model.num_layers) +
               " transformer blocks",
           "every virtual stage holds at least one block: lower pipeline_parallel or "
           "pipeline_virtual_stages");
  const auto m = static_cast<size_t>(c.gradient_accumulation_steps);
  TZ_CHECK(!interleaved || pp == 1 || v >= 2,
           "pipeline_schedule interleaved needs tierzero.pipeline_virtual_stages >= 2 (model "
           "chunks per rank; it is 1)",
           "give --virtual-stages 2 or more, or use the 1f1b schedule");
  TZ_CHECK(!interleaved || pp == 1 || m % pp == 0,
           "pipeline_schedule interleaved runs the micro-batches in groups of pipeline_parallel " +
               std::to_string(pp) + ": gradient_accumulation_steps " + std::to_string(m) +
               " is not a multiple of it",
           "choose --micro-batches (gradient_accumulation_steps) a multiple of --pp");
  std::vector<nn::PipelineStage> stages = nn::partition_pipeline(model, pp * v, blocks);
  if (pp > 1) {
    nn::PipelineShape shape;
    shape.stages = pp;
    shape.chunks = v;
    shape.micro_batches = static_cast<size_t>(c.gradient_accumulation_steps);
    shape.schedule = nn::pipeline_schedule_from_name(c.pipeline_schedule);
    nn::validate(shape);
  }
  // Names the tensor or the extent that does not split.
  (void)nn::ParamLayout(model, nn::TensorParallel{tp, 0});
  (void)nn::ActivationDims::of(model, static_cast<size_t>(c.micro_batch_size),
                               static_cast<size_t>(c.seq_len), tp, c.sequence_parallel, u);
  if (c.sequence_parallel && tp == 1)
    log::warn(
        "tierzero.sequence_parallel has no effect without tensor parallelism "
        "(tensor_parallel is 1)");
  return stages;
}

// The initial fp32 values of elements [begin, begin + count) of a layout's flat buffer.
using InitialValues = std::function<void(size_t begin, size_t count, float* out)>;

// A checkpoint block's element type: fp32 for 4-byte states, else the working type.
std::string block_dtype(const TrainConfig& c, size_t elem_bytes) {
  return dtype_name(elem_bytes == sizeof(float) ? DType::f32 : working_dtype(c));
}

// The configured device; "cuda" without an index under a launcher with several ranks is the GPU
// of the rank's node-local rank (round robin over the node's GPUs), so ranks do not share one.
std::unique_ptr<Device> open_device(const TrainConfig& c, comm::MpiSession* session) {
  const auto threads = static_cast<int>(c.threads);
  if (c.device != "cuda" || session == nullptr || session->size() == 1)
    return make_device(c.device, threads);
  const int local = comm::node_local_rank(session->world());
  const int gpus = cuda_device_count();
  if (gpus == 0) return make_device(c.device, threads);  // its error says why
  log::info("rank " + std::to_string(session->rank()) + " (node-local rank " +
            std::to_string(local) + ") uses cuda:" + std::to_string(local % gpus));
  return make_cuda_device(local % gpus);
}

zero::AdamWConfig adamw_config_from(const OptimizerConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

// "device tier", or where the offloaded states go: "optimizer on nvme (50% of units), ...".
std::string describe_placement(const TrainConfig& c) {
  std::string out;
  auto add = [&](const char* what, const OffloadConfig& o) {
    if (o.device == "none") return;
    if (!out.empty()) out += ", ";
    out += std::string(what) + " on " + (o.device == "cpu" ? "host" : "nvme");
    if (o.ratio < 1.0)
      out += " (" + std::to_string(static_cast<int>(o.ratio * 100.0)) + "% of units)";
  };
  add("params", c.zero.offload_param);
  add("optimizer", c.zero.offload_optimizer);
  return out.empty() ? "device tier" : out;
}

}  // namespace

struct Trainer::State {
  // Declared first so that it is destroyed last: the store's collectives need MPI alive.
  std::unique_ptr<comm::MpiSession> session;  // the ZeRO path only
  int rank = 0;
  int world_size = 1;
  // This rank's data-parallel replica and their count (world = dp x tensor_parallel x
  // pipeline_parallel x ulysses_parallel): ranks of one tensor-parallel, pipeline or Ulysses
  // group read the same batches (a Ulysses rank takes its slice of each sequence).
  int dp_rank = 0;
  int dp_size = 1;
  std::unique_ptr<Device> device;
  std::unique_ptr<DeviceAllocator> allocator;
  // The process mesh (dp x tp) and, on CUDA with several ranks, the store's partition group and
  // the model's tensor-parallel group through NCCL on their own streams. After the device: an
  // NCCL communicator frees device memory and its stream when it goes, before the device does.
  std::unique_ptr<comm::ProcessMesh> mesh;
  std::unique_ptr<comm::Communicator> partition_nccl;
  std::unique_ptr<comm::Communicator> tensor_parallel_nccl;
  std::unique_ptr<comm::Communicator> ulysses_nccl;
  // Pipeline parallelism: the stages, the pipeline group (NCCL on CUDA) and the group the first
  // and last stage share the tied embeddings over (null on the other stages).
  std::vector<nn::PipelineStage> stages;
  comm::Communicator* pipeline = nullptr;
  std::unique_ptr<comm::Communicator> pipeline_nccl;
  std::unique_ptr<comm::MpiCommunicator> tie_mpi;
  std::unique_ptr<comm::Communicator> tie_nccl;
  comm::Communicator* tie = nullptr;
  nn::GPTConfig model_config;
  std::unique_ptr<nn::GPT> model;  // chunk 0 of the rank's pipeline chunks: the whole model at pp 1
  // The interleaved schedule's further chunks (virtual stages s + p, s + 2p, ...), the rank's
  // layout over all its chunks and where each chunk's units start in it; empty at one chunk.
  std::vector<std::unique_ptr<nn::GPT>> more_chunks;
  std::unique_ptr<nn::ParamLayout> chunks_layout;
  std::vector<size_t> chunk_units;
  // The rank's parameters: its chunks' (one chunk: the model's layout).
  const nn::ParamLayout& layout() const { return chunks_layout ? *chunks_layout : model->layout(); }
  std::vector<nn::GPT*> chunk_models() const {
    std::vector<nn::GPT*> all = {model.get()};
    for (const auto& m : more_chunks) all.push_back(m.get());
    return all;
  }
  std::unique_ptr<nn::LocalParams> params;
  std::unique_ptr<AdamWOptimizer> optimizer;
  std::unique_ptr<zero::PartitionStore> store;  // the ZeRO path: params, grads, AdamW states
  // The comm layer's staging from the store's pool; after the store, so it goes first.
  std::unique_ptr<zero::CommStagingPool> comm_staging;
  std::unique_ptr<StoreParamProvider> store_params;
  std::unique_ptr<DataLoader> train_loader;
  std::unique_ptr<DataLoader> val_loader;
  double unigram_entropy = std::numeric_limits<double>::quiet_NaN();
};

Trainer::Trainer(TrainConfig config) : config_(std::move(config)), state_(new State) {
  log::set_level(log::level_from_name(config_.log_level));
  check_supported(config_);
  State& s = *state_;
  // The reference path stays exactly the one-rank loop; anything else goes through the store.
  // The whole world is the data-parallel (partition) group for now.
  // 16-bit working parameters live in the store (the reference path is fp32 only).
  if (config_.zero.stage > 0 || comm::launched_by_mpi() || config_.bf16 || config_.fp16 ||
      config_.tensor_parallel > 1 || config_.pipeline_parallel > 1 ||
      config_.ulysses_parallel > 1) {
    s.session = std::make_unique<comm::MpiSession>(nullptr, nullptr);
    s.rank = s.session->rank();
    s.world_size = s.session->size();
    log::set_rank(s.rank, s.world_size);
  }
  if (s.rank == 0 && !config_.ignored_keys.empty()) log::warn(config_.ignored_keys_warning());
  if (s.world_size == 1) {
    build();
    return;
  }
  // As in run(): a rank that fails (the store's constructor is collective) ends the whole job.
  try {
    build();
  } catch (const Error& e) {
    comm::abort_job(e.what());
  }
}

void Trainer::build() {
  State& s = *state_;
  const auto B = static_cast<size_t>(config_.micro_batch_size);
  const auto T = static_cast<size_t>(config_.seq_len);

  s.model_config = gpt_config_from(config_.model);
  if (!config_.load_checkpoint.empty()) {
    s.model_config = is_safetensors_path(config_.load_checkpoint)
                         ? read_gpt2_safetensors_config(config_.load_checkpoint)
                         : read_checkpoint_config(config_.load_checkpoint);
    log::info("model shape from checkpoint '" + config_.load_checkpoint +
              "': " + s.model_config.str());
  }
  TZ_CHECK(T <= s.model_config.max_seq_len,
           "seq_len " + std::to_string(T) + " exceeds the model's context length " +
               std::to_string(s.model_config.max_seq_len),
           "lower tierzero.seq_len");
  s.stages = check_parallel(config_, s.model_config, s.world_size);
  comm::MeshShape shape;
  shape.tp = static_cast<int>(config_.tensor_parallel);
  shape.pp = static_cast<int>(config_.pipeline_parallel);
  shape.sp = static_cast<int>(config_.ulysses_parallel);
  shape.dp = s.world_size / (shape.tp * shape.pp * shape.sp);
  const comm::MeshCoord coords = comm::MeshLayout(shape).coords(s.rank);
  s.dp_rank = coords[static_cast<size_t>(comm::MeshDim::dp)];
  s.dp_size = shape.dp;
  // The rank's chunks: virtual stages pp_rank, pp_rank + pp, ... (one at gpipe and 1f1b).
  const auto pp_rank = static_cast<size_t>(coords[static_cast<size_t>(comm::MeshDim::pp)]);
  const std::vector<nn::PipelineStage> chunk_stages =
      nn::rank_chunks(s.stages, static_cast<size_t>(shape.pp), pp_rank);
  const nn::PipelineStage stage = chunk_stages.front();

  // Data first: a bad path should fail before any large allocation.
  const size_t V = s.model_config.vocab_size;
  if (config_.train_data.empty()) {
    TZ_CHECK(
        V >= static_cast<size_t>(kByteVocabSize),
        "the built-in corpus needs vocab_size >= 257 (bytes + EOT), model has " + std::to_string(V),
        "give training data with --data or raise model.vocab_size");
    std::vector<uint16_t> corpus = synthetic_corpus(kBuiltinCorpusTokens);
    std::vector<uint16_t> val(corpus.end() - kBuiltinValTokens, corpus.end());
    corpus.resize(corpus.size() - kBuiltinValTokens);
    s.unigram_entropy = unigram_entropy(corpus, V);
    std::vector<std::unique_ptr<TokenShard>> train, held_out;
    train.push_back(make_memory_shard("built-in corpus (train)", std::move(corpus)));
    held_out.push_back(make_memory_shard("built-in corpus (val)", std::move(val)));
    s.train_loader = std::make_unique<DataLoader>(std::move(train), B, T, V, s.dp_rank, s.dp_size);
    if (config_.val_data.empty())
      s.val_loader =
          std::make_unique<DataLoader>(std::move(held_out), B, T, V, s.dp_rank, s.dp_size);
  } else {
    s.train_loader = std::make_unique<DataLoader>(open_token_shards(config_.train_data), B, T, V,
                                                  s.dp_rank, s.dp_size);
  }
  if (!config_.val_data.empty())
    s.val_loader = std::make_unique<DataLoader>(open_token_shards(config_.val_data), B, T, V,
                                                s.dp_rank, s.dp_size);

  s.device = open_device(config_, s.session.get());
  const auto budget = static_cast<size_t>(config_.device_memory_budget_gb * 1073741824.0);
  s.allocator = std::make_unique<DeviceAllocator>(*s.device, budget);
  nn::ModelParallel parallel;
  parallel.sequence_parallel = config_.sequence_parallel;
  parallel.pipeline = stage;
  if (s.session) {
    s.mesh = std::make_unique<comm::ProcessMesh>(s.session->world(), shape);
    parallel.tensor_parallel = &s.mesh->group(comm::MeshDim::tp);
    s.pipeline = &s.mesh->group(comm::MeshDim::pp);
    const bool cuda = s.device->kind() == DeviceKind::cuda;
    // The model's collectives and transfers run on its device buffers.
    if (cuda && shape.tp > 1) {
      s.tensor_parallel_nccl =
          comm::make_nccl_communicator(s.mesh->group(comm::MeshDim::tp), *s.device);
      parallel.tensor_parallel = s.tensor_parallel_nccl.get();
    }
    // Ulysses' all-to-alls, over the ranks that share a data-parallel replica's sequences.
    if (shape.sp > 1) {
      parallel.ulysses = &s.mesh->group(comm::MeshDim::sp);
      if (cuda) {
        s.ulysses_nccl = comm::make_nccl_communicator(s.mesh->group(comm::MeshDim::sp), *s.device);
        parallel.ulysses = s.ulysses_nccl.get();
      }
    }
    TZ_CHECK(!cuda || chunk_stages.size() == 1,
             "pipeline_schedule interleaved on CUDA is not supported yet: NCCL matches "
             "point-to-point transfers by their order, and the interleaved executor sends "
             "activations and gradients between the same two ranks in orders that need tags",
             "use 1f1b or gpipe on CUDA, or run interleaved on the CPU backend");
    if (cuda && shape.pp > 1) {
      s.pipeline_nccl = comm::make_nccl_communicator(s.mesh->group(comm::MeshDim::pp), *s.device);
      s.pipeline = s.pipeline_nccl.get();
    }
    if (shape.pp > 1) {
      // The first and the last stage (of one dp replica and tp rank) share the embeddings' unit:
      // its gradients are summed over the two. Every rank takes part in the split; the middle
      // stages get a group of their own, unused.
      const bool ends = pp_rank == 0 || pp_rank + 1 == static_cast<size_t>(shape.pp);
      const int key = coords[static_cast<size_t>(comm::MeshDim::pp)];
      const int color = ends ? s.dp_rank * shape.tp + coords[static_cast<size_t>(comm::MeshDim::tp)]
                             : s.world_size + s.rank;
      s.tie_mpi = s.session->world().split(color, key, "tie");
      if (ends) s.tie = s.tie_mpi.get();
      if (ends && cuda) {
        s.tie_nccl = comm::make_nccl_communicator(*s.tie_mpi, *s.device);
        s.tie = s.tie_nccl.get();
      }
    }
  }
  s.model = std::make_unique<nn::GPT>(s.model_config, *s.allocator, parallel);
  if (chunk_stages.size() > 1) {
    for (size_t c = 1; c < chunk_stages.size(); ++c) {
      nn::ModelParallel chunk = parallel;
      chunk.pipeline = chunk_stages[c];
      s.more_chunks.push_back(std::make_unique<nn::GPT>(s.model_config, *s.allocator, chunk));
      s.more_chunks.back()->share_scratch(*s.model);  // one action at a time: one scratch
    }
    s.chunks_layout = std::make_unique<nn::ParamLayout>(
        nn::chunks_param_layout(s.model_config, chunk_stages, s.model->layout().tp()));
    s.chunk_units = nn::chunk_unit_offsets(s.model_config, chunk_stages);
  }

  // Every rank creates only what it keeps: the initial weights are counter-based draws (or the
  // checkpoint's values) for any range of its layout, so the store asks for each unit's or shard's
  // elements alone, straight into their tier, and no rank builds the whole model. Every rank gets
  // the same values for the same elements, at any world size, so no broadcast is needed.
  const nn::ParamLayout& layout = s.layout();
  InitialValues initial;  // (begin, count, out) over the layout's flat buffer
  // A model file is read by range: this rank's layout is a piece of the file's one-rank layout
  // (its tp pieces, its pipeline stage's tensors), mapped run by run.
  std::unique_ptr<nn::ParamLayout> file_layout;  // the file's model, tp 1, every stage
  std::unique_ptr<ModelRanges> file;
  if (config_.load_checkpoint.empty()) {
    initial = [&layout, &s, seed = config_.seed](size_t begin, size_t count, float* out) {
      nn::init_gpt2_range(layout, s.model_config, seed, begin, count, out);
    };
  } else {
    file_layout = std::make_unique<nn::ParamLayout>(s.model_config);
    file = open_model_ranges(config_.load_checkpoint, *file_layout);
    if (layout.tp().size == 1 && stage.stages == 1) {
      initial = [&file](size_t begin, size_t count, float* out) { file->read(begin, count, out); };
    } else {
      // A tensor's runs are read together (ModelRanges::read_runs): a row-parallel piece is a
      // part of every row, which read run by run would cost a read per row.
      initial = [&file, &file_layout, &layout](size_t begin, size_t count, float* out) {
        std::fill_n(out, count, 0.0f);
        std::vector<ModelRanges::Run> runs;  // of one tensor
        std::vector<float> scratch;          // (block) fp32
        const nn::ParamTensor* tensor = nullptr;
        nn::for_each_whole_run(layout, *file_layout, begin, count,
                               [&](const nn::ParamTensor& t, size_t full, size_t at, size_t n) {
                                 if (&t != tensor) {
                                   file->read_runs(runs, out, scratch);
                                   runs.clear();
                                   tensor = &t;
                                 }
                                 runs.push_back({full, at, n});
                               });
        file->read_runs(runs, out, scratch);
      };
    }
  }
  for (nn::GPT* m : s.chunk_models())
    m->set_activation_checkpointing(config_.activation_checkpointing);
  if (s.session) {
    zero::StoreConfig store_config = store_config_from(config_);
    // The host budget is the node's: its ranks share it equally.
    const auto local_ranks = static_cast<size_t>(comm::node_local_size(s.session->world()));
    store_config.host_budget_bytes /= std::max<size_t>(local_ranks, 1);
    if (s.rank == 0 && local_ranks > 1)
      log::info("host memory budget " + format_bytes(store_config.host_budget_bytes) +
                " per rank: the node's " +
                format_bytes(store_config.host_budget_bytes * local_ranks) + " shared by its " +
                std::to_string(local_ranks) + " ranks");
    UnitGrouping grouping = group_units(layout, static_cast<size_t>(config_.blocks_per_unit));
    if (s.tie)
      for (zero::UnitSpec& spec : grouping.specs) spec.tied = spec.name == "embeddings";
    comm::Communicator* partition = &s.mesh->partition_group();
    if (s.device->kind() == DeviceKind::cuda && s.mesh->partition_group().size() > 1) {
      // Device buffers go to NCCL directly instead of being staged through host memory for MPI.
      s.partition_nccl = comm::make_nccl_communicator(s.mesh->partition_group(), *s.device);
      partition = s.partition_nccl.get();
    }
    // The gradient norm covers the whole model: summed over the tensor-parallel group, where the
    // replicated tensors (equal on every tp rank) count once, and over the pipeline's stages,
    // where the embeddings the first and last stage share count once.
    zero::StoreGroups groups;
    if (shape.tp > 1) {
      groups.model_parallel.push_back(parallel.tensor_parallel);
      groups.replica = parallel.tensor_parallel;
    }
    if (shape.pp > 1) groups.model_parallel.push_back(s.pipeline);
    groups.tie = s.tie;
    s.store = std::make_unique<zero::PartitionStore>(grouping.specs, store_config,
                                                     adamw_config_from(config_.optimizer),
                                                     *partition, *s.allocator, groups);
    // With a pinned pool (state off the device), the comm layer's staging comes from it too, so
    // the host budget covers it.
    if (offload::HostPool* pool = s.store->host_pool())
      s.comm_staging = std::make_unique<zero::CommStagingPool>(*pool);
    for (size_t g = 0; g < grouping.specs.size(); ++g)
      s.store->load_unit_from(g, [&, start = grouping.start[g]](size_t b, size_t n, float* out) {
        initial(start + b, n, out);
      });
    s.store_params = std::make_unique<StoreParamProvider>(*s.store, std::move(grouping));
  } else {
    s.params = std::make_unique<nn::LocalParams>(layout, *s.allocator);
    // In chunks, so host memory holds one chunk of the model at a time.
    const size_t total = layout.total_numel();
    std::vector<float> chunk(std::min<size_t>(total, size_t{1} << 22));  // (chunk) fp32
    for (size_t at = 0; at < total; at += chunk.size()) {
      const size_t n = std::min(chunk.size(), total - at);
      initial(at, n, chunk.data());
      s.device->copy(s.params->params() + at, chunk.data(), n * sizeof(float),
                     CopyKind::host_to_device, s.device->default_stream());
      s.device->default_stream().synchronize();
    }
    // AdamW's m and v (8 bytes per parameter) only when there are steps to take: `eval` of a
    // large checkpoint should not pay for them.
    if (config_.steps > 0)
      s.optimizer = std::make_unique<AdamWOptimizer>(config_.optimizer, layout, *s.allocator);
  }
}

Trainer::~Trainer() = default;

void Trainer::set_profile(const std::string& path, bool timeline) {
  profile_path_ = path;
  profile_timeline_ = timeline;
}

namespace {

// A recorder primed with what the run is, where each unit's states live, and what the estimator
// predicts for every tier and category, so the report can set measured against predicted.
std::unique_ptr<profile::ProfileRecorder> make_recorder(
    const TrainConfig& c, bool timeline, const std::vector<nn::GPT*>& chunks,
    const nn::ParamLayout& layout, const zero::PartitionStore* store, const UnitGrouping* grouping,
    int rank, int ranks, size_t budget, const Device& device) {
  profile::RecorderOptions options;
  options.timeline = timeline;
  // Where the driver counts device bytes (CUDA), the report shows what nobody accounted for.
  if (device.driver_used_bytes() >= 0)
    options.driver_device_used = [&device] { return device.driver_used_bytes(); };
  auto recorder = std::make_unique<profile::ProfileRecorder>(options);
  const nn::GPT& model = *chunks.front();
  std::vector<nn::PipelineStage> chunk_stages;
  std::string stage_text;
  for (const nn::GPT* m : chunks) {
    chunk_stages.push_back(m->stage());
    stage_text += (stage_text.empty() ? "" : "; ") + m->stage().str();
  }
  const size_t pp = model.stage().stages / chunks.size();
  profile::RunInfo info;
  info.model = "GPT-2 " + model.config().str();
  info.parameters = static_cast<int64_t>(layout.parameter_count());
  info.ranks = ranks;
  info.rank = rank;
  info.stage = static_cast<int>(c.zero.stage);
  info.device = device.name();
  info.device_budget = budget;
  info.extra["micro_batch"] = std::to_string(c.micro_batch_size);
  info.extra["seq_len"] = std::to_string(c.seq_len);
  info.extra["offload_param"] = c.zero.offload_param.device;
  info.extra["offload_optimizer"] = c.zero.offload_optimizer.device;
  info.extra["activation_checkpointing"] = c.activation_checkpointing ? "on" : "off";
  // Under tensor parallelism the parameters, placements and estimate are this rank's pieces.
  const size_t tp = model.tensor_parallel();
  info.extra["tensor_parallel"] = std::to_string(tp);
  info.extra["sequence_parallel"] = model.sequence_parallel() ? "on" : "off";
  if (pp > 1) {
    info.extra["pipeline_parallel"] = std::to_string(pp);
    info.extra["pipeline_stage"] = stage_text;
    info.extra["pipeline_schedule"] = c.pipeline_schedule;
    if (chunks.size() > 1) info.extra["pipeline_virtual_stages"] = std::to_string(chunks.size());
  }
  if (tp > 1 || pp > 1)
    info.extra["parameters_whole_model"] =
        std::to_string(nn::ParamLayout(model.config()).parameter_count());
  recorder->set_run_info(info);
  std::vector<profile::PlacementRow> rows;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const nn::ParamUnit& unit = layout.units()[u];
    profile::PlacementRow row{unit.name, unit.numel, "device", "device", "device"};
    if (store) {
      // The store unit holding it (blocks_per_unit joins several nn units into one).
      const zero::UnitPlacement& p = store->placement()[grouping ? grouping->store_unit[u] : u];
      row.param_tier = tier_name(p.param);
      row.grad_tier = tier_name(p.grad);
      row.optimizer_tier = tier_name(p.optimizer);
    }
    rows.push_back(row);
  }
  recorder->set_placements(rows);
  profile::WorldLayout world;
  world.tp = static_cast<int>(tp);
  world.pp = static_cast<int>(pp);
  world.sp = static_cast<int>(model.ulysses());
  world.dp = ranks / (world.tp * world.pp * world.sp);
  const auto B = static_cast<size_t>(c.micro_batch_size), T = static_cast<size_t>(c.seq_len);
  // Under pipeline parallelism the schedule's micro-batches in flight, each the stage's blocks.
  const size_t activations =
      world.pp > 1
          ? PipelineExecutor::activation_bytes_for(
                model.config(), model.dims(B, T), chunk_stages,
                nn::pipeline_schedule_from_name(c.pipeline_schedule),
                static_cast<size_t>(c.gradient_accumulation_steps), c.activation_checkpointing)
          : nn::GPT::activation_bytes_for(model.config(), B, T, c.activation_checkpointing, tp,
                                          model.sequence_parallel(), model.ulysses());
  const profile::Estimate e = profile::estimate(estimate_input_from(
      c, units_from_layout(layout, static_cast<size_t>(c.blocks_per_unit)), world, activations));
  profile::TierCategoryBytes predicted{};
  for (size_t t = 0; t < kNumTiers; ++t)
    for (size_t k = 0; k < kNumCategories; ++k)
      predicted[t][k] = e.at(static_cast<Tier>(t), static_cast<Category>(k));
  recorder->set_predicted(predicted);
  return recorder;
}

}  // namespace

namespace {

// The sum over the group of a few per-rank values (the group reduces f32).
void group_sum(comm::Communicator& group, float* values, size_t count) {
  std::vector<float> sum(count);  // (count)
  group.all_reduce(values, sum.data(), count, DType::f32, comm::ReduceOp::sum);
  std::copy(sum.begin(), sum.end(), values);
}

// Mean loss over `batches` validation batches. With a group, data-parallel replica r of w
// evaluates the batches r, r + w, ... (its loader's stride) and the mean is all-reduced over the
// whole world (a tensor-parallel group's ranks count their common batches alike, which the mean
// divides out); every rank runs the same number of evaluations (surplus ones are not counted)
// because each one gathers parameters at stage 3 and runs the tensor-parallel collectives.
double validate(nn::GPT& model, nn::ParamProvider& params, zero::PartitionStore* store,
                PipelineExecutor* pipe, DataLoader& loader, size_t batches, size_t B, size_t T,
                int rank, int world_size, comm::Communicator* group) {
  if (store) store->begin_pass(zero::PassKind::eval);  // not in the training trace
  std::vector<int32_t> x(B * T), y(B * T);             // (B, T) each
  loader.reset();
  const auto w = static_cast<size_t>(world_size);
  const size_t rounds = (batches + w - 1) / w;
  // Under pipeline parallelism only the last stage has a loss; the others count nothing.
  const bool has_loss = pipe ? pipe->holds_loss() : model.stage().last();
  double sum = 0.0;
  size_t counted = 0;
  for (size_t k = 0; k < rounds; ++k) {
    loader.next_batch(x.data(), y.data());
    const double loss = pipe
                            ? pipe->evaluate(params, x.data(), y.data())
                            : static_cast<double>(model.evaluate(params, x.data(), y.data(), B, T));
    if (has_loss && static_cast<size_t>(rank) + k * w < batches) {
      sum += loss;
      ++counted;
    }
  }
  if (!group) return sum / static_cast<double>(batches);
  float totals[2] = {static_cast<float>(sum), static_cast<float>(counted)};
  group_sum(*group, totals, 2);
  return static_cast<double>(totals[0]) / static_cast<double>(totals[1]);
}

// This rank's tracked bytes per tier and category (see Trainer::run), then `sections` (an
// object: the pipeline's or Ulysses' description of what the rank's activations should be).
void write_memory_json(const std::string& path, int rank, int ranks,
                       const nlohmann::ordered_json& sections) {
  const std::string file = rank == 0 ? path : path + ".rank" + std::to_string(rank);
  const MemoryTracker& t = MemoryTracker::global();
  nlohmann::ordered_json j;
  j["rank"] = rank;
  j["ranks"] = ranks;
  nlohmann::ordered_json tiers = nlohmann::ordered_json::object();
  for (size_t ti = 0; ti < kNumTiers; ++ti) {
    const auto tier = static_cast<Tier>(ti);
    nlohmann::ordered_json cats = nlohmann::ordered_json::object();
    for (size_t c = 0; c < kNumCategories; ++c) {
      const auto cat = static_cast<Category>(c);
      cats[category_name(cat)] = {{"current", t.current(tier, cat)}, {"peak", t.peak(tier, cat)}};
    }
    tiers[tier_name(tier)] = cats;
  }
  j["tiers"] = tiers;
  // Each tier's peak of the sum over categories (not the sum of their peaks): what a budget limits.
  nlohmann::ordered_json tier_peaks = nlohmann::ordered_json::object();
  for (size_t ti = 0; ti < kNumTiers; ++ti)
    tier_peaks[tier_name(static_cast<Tier>(ti))] = t.peak(static_cast<Tier>(ti));
  j["tier_peaks"] = tier_peaks;
  // What the operating system saw: the process's peak resident set (every host allocation, the
  // CPU backend's device arena, libraries and untracked memory), to check the budgets against.
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) == 0)
    j["process"] = {{"peak_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024}};
  for (const auto& [key, value] : sections.items()) j[key] = value;
  const std::string json = j.dump() + "\n";
  std::FILE* f = std::fopen(file.c_str(), "w");
  TZ_CHECK(f != nullptr, "cannot open the memory file '" + file + "': " + std::strerror(errno),
           "check that the directory exists and is writable");
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  TZ_CHECK(std::fclose(f) == 0 && ok,
           "writing the memory file '" + file + "' failed: " + std::strerror(errno),
           "check the free space of its file system");
}

// The --memory-json section of a Ulysses rank: its slice of the sequence, and its activation
// bytes by the model's own count beside those of the same micro-batch on one rank (the tests
// check the tracker's peak against the first and print the ratio to the second).
nlohmann::ordered_json ulysses_memory_json(const nn::GPT& model, const TrainConfig& c, size_t B,
                                           size_t T) {
  const bool ckpt = c.activation_checkpointing;
  const nn::ActivationDims d = model.dims(B, T);
  nlohmann::ordered_json j;
  j["ulysses"] = model.ulysses();
  j["seq_len"] = T;
  j["positions"] = d.T;
  j["local_heads"] = d.local_heads;
  j["activation_bytes"] =
      nn::GPT::activation_bytes_for(model.config(), B, T, ckpt, 1, false, model.ulysses());
  j["one_rank_activation_bytes"] = nn::GPT::activation_bytes_for(model.config(), B, T, ckpt);
  return j;
}

// The --memory-json section of a pipeline rank: its stage, and what its activations should be:
// the chunks' one shared scratch plus, per chunk, one of its micro-batches' activations per
// micro-batch the schedule keeps in flight there (the tests check the tracker's peak against it).
nlohmann::ordered_json pipeline_memory_json(const PipelineExecutor& pipe,
                                            const std::vector<nn::GPT*>& chunks,
                                            const TrainConfig& c, size_t B, size_t T) {
  const nn::GPT& model = *chunks.front();
  const nn::ActivationDims dims = model.dims(B, T);
  const bool ckpt = c.activation_checkpointing;
  const auto bytes = [&](const nn::PipelineStage& st) {
    return nn::GPT::micro_batch_bytes_for(model.config(), dims, st, ckpt);
  };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  size_t blocks = 0, in_flight = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const nn::PipelineStage& st = chunks[k]->stage();
    blocks += st.num_blocks;
    in_flight += pipe.slots(k);
    list.push_back({{"virtual_stage", st.stage},
                    {"first_block", st.first_block},
                    {"blocks", st.num_blocks},
                    {"in_flight", pipe.slots(k)},
                    {"micro_batch_activation_bytes", bytes(st)}});
  }
  nlohmann::ordered_json j;
  j["stage"] = pipe.shape().stage;
  j["stages"] = pipe.shape().stages;
  j["virtual_stages"] = chunks.size();
  j["schedule"] = c.pipeline_schedule;
  j["micro_batches"] = c.gradient_accumulation_steps;
  j["first_block"] = model.stage().first_block;
  j["blocks"] = blocks;
  j["in_flight"] = in_flight;
  j["micro_batch_activation_bytes"] = bytes(model.stage());  // chunk 0's
  j["scratch_activation_bytes"] = nn::ModelScratch::bytes_for(dims, ckpt);
  j["chunks"] = list;
  return j;
}

// The memory summary of this rank with a "rank r: " prefix on every line, written at once so
// that ranks sharing a terminal do not interleave within a summary.
void print_rank_memory_summary(std::FILE* out, int rank, const MemoryTracker& tracker) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* buffer = open_memstream(&text, &size);
  if (!buffer) {  // no memory for the buffer: print unprefixed rather than not at all
    print_memory_summary(out, tracker);
    return;
  }
  print_memory_summary(buffer, tracker);
  std::fclose(buffer);
  std::string prefixed;
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  bool line_start = true;
  for (size_t i = 0; i < size; ++i) {
    if (line_start) prefixed += prefix;
    prefixed += text[i];
    line_start = text[i] == '\n';
  }
  std::free(text);
  std::fwrite(prefixed.data(), 1, prefixed.size(), out);
  std::fflush(out);
}

}  // namespace

void Trainer::for_each_param_piece(const std::function<void(size_t, size_t, const float*)>& fn) {
  State& s = *state_;
  std::vector<float> part;  // (unit numel or chunk) fp32
  if (s.store) {
    const std::vector<size_t>& starts = s.store_params->grouping().start;
    for (size_t g = 0; g < starts.size(); ++g) {
      part.resize(s.store->plan().units()[g].numel);
      s.store->read_unit(g, part.data());
      fn(starts[g], part.size(), part.data());
    }
    return;
  }
  const size_t total = s.layout().total_numel();
  part.resize(std::min<size_t>(total, size_t{1} << 22));
  for (size_t at = 0; at < total; at += part.size()) {
    const size_t n = std::min(part.size(), total - at);
    s.device->copy(part.data(), s.params->params() + at, n * sizeof(float),
                   CopyKind::device_to_host, s.device->default_stream());
    s.device->default_stream().synchronize();
    fn(at, n, part.data());
  }
}

void Trainer::save_model_streamed() {
  State& s = *state_;
  const nn::ParamLayout& layout = s.layout();
  const bool split = layout.tp().size > 1 || config_.pipeline_parallel > 1;
  if (!split) {
    std::unique_ptr<ModelFileWriter> writer;
    if (s.rank == 0)
      writer = std::make_unique<ModelFileWriter>(config_.save_checkpoint, s.model_config, layout);
    for_each_param_piece([&](size_t begin, size_t count, const float* values) {
      if (writer) writer->write(begin, count, values);
    });
    if (writer) writer->commit();
    return;
  }
  // Data-parallel replica 0 (sequence-parallel rank 0) holds every piece once; the other
  // replicas only take part in reads.
  // Elements per message: 16 MiB; TIERZERO_TEST_SAVE_CHUNK_ELEMS makes it small enough for the
  // tests' tiny models to take several (partial chunks, chunks across units).
  size_t kChunk = size_t{1} << 22;
  if (const char* v = std::getenv("TIERZERO_TEST_SAVE_CHUNK_ELEMS"); v != nullptr && *v != '\0')
    kChunk = std::max<size_t>(1, std::strtoull(v, nullptr, 10));
  const int tag = 7;
  comm::Communicator& world = s.session->world();
  const comm::MeshLayout& mesh = s.mesh->layout();
  const comm::MeshCoord me = mesh.coords(s.rank);
  if (me[static_cast<size_t>(comm::MeshDim::dp)] != 0 ||
      me[static_cast<size_t>(comm::MeshDim::sp)] != 0) {
    for_each_param_piece([](size_t, size_t, const float*) {});
    return;
  }
  if (s.rank != 0) {
    std::vector<float> chunk;  // (up to kChunk) fp32, the next message
    chunk.reserve(kChunk);
    const auto send = [&] {
      world.send(chunk.data(), chunk.size(), DType::f32, 0, tag);
      chunk.clear();
    };
    for_each_param_piece([&](size_t, size_t count, const float* values) {
      for (size_t i = 0; i < count;) {
        const size_t take = std::min(kChunk - chunk.size(), count - i);
        chunk.insert(chunk.end(), values + i, values + i + take);
        i += take;
        if (chunk.size() == kChunk) send();
      }
    });
    if (!chunk.empty()) send();
    return;
  }
  // Rank 0: the file's layout is the one-rank model's; every rank's layout maps onto it run by
  // run. Replicated tensors come from tp rank 0, the tied embeddings from the first stage.
  const nn::ParamLayout full_layout(s.model_config);
  ModelFileWriter writer(config_.save_checkpoint, s.model_config, full_layout);
  struct Source {
    int from;
    size_t tp_rank, stage;
    nn::ParamLayout layout;
    size_t done = 0;  // elements received
  };
  const auto write = [&](const nn::ParamLayout& from_layout, size_t tp_rank, size_t stage,
                         size_t begin, size_t count, const float* values) {
    nn::for_each_whole_run(from_layout, full_layout, begin, count,
                           [&](const nn::ParamTensor& t, size_t full, size_t at, size_t n) {
                             if (t.replicated() && tp_rank > 0) return;
                             if (t.kind == nn::ParamKind::wte && stage > 0) return;
                             writer.write(full, n, values + at);
                           });
  };
  const auto tp = static_cast<size_t>(mesh.shape().tp);
  const auto pp = static_cast<size_t>(mesh.shape().pp);
  std::vector<Source> sources;
  for (size_t st = 0; st < pp; ++st)
    for (size_t t = 0; t < tp; ++t) {
      comm::MeshCoord c{};
      c[static_cast<size_t>(comm::MeshDim::tp)] = static_cast<int>(t);
      c[static_cast<size_t>(comm::MeshDim::pp)] = static_cast<int>(st);
      const int from = mesh.rank_of(c);
      if (from != 0)
        sources.push_back(
            {from, t, st,
             nn::chunks_param_layout(s.model_config, nn::rank_chunks(s.stages, pp, st),
                                     nn::TensorParallel{tp, t})});
    }
  std::vector<float> chunk(kChunk);  // (kChunk) fp32, a received message
  const auto receive_until = [&](Source& src, size_t target) {
    const size_t total = src.layout.total_numel();
    while (src.done < std::min(target, total)) {
      const size_t n = std::min(kChunk, total - src.done);
      world.recv(chunk.data(), n, DType::f32, src.from, tag);
      write(src.layout, src.tp_rank, src.stage, src.done, n, chunk.data());
      src.done += n;
    }
  };
  // Rank 0's own pieces, and after each the others' chunks in the same proportion: every source
  // (and the data-parallel peers its reads wait on) moves at rank 0's pace.
  const size_t own_total = layout.total_numel();
  for_each_param_piece([&](size_t begin, size_t count, const float* values) {
    write(layout, 0, 0, begin, count, values);
    const double share = static_cast<double>(begin + count) / static_cast<double>(own_total);
    for (Source& src : sources)
      receive_until(src,
                    static_cast<size_t>(share * static_cast<double>(src.layout.total_numel())));
  });
  for (Source& src : sources) receive_until(src, src.layout.total_numel());
  writer.commit();
}

nlohmann::ordered_json Trainer::checkpoint_identity() const {
  const State& s = *state_;
  nlohmann::ordered_json id;
  id["model"] = s.model_config.str();
  const nn::GPTConfig& mc = s.model_config;
  id["model_shape"] = {{"max_seq_len", mc.max_seq_len},
                       {"vocab_size", mc.vocab_size},
                       {"padded_vocab_size", mc.padded_vocab_size},
                       {"num_layers", mc.num_layers},
                       {"num_heads", mc.num_heads},
                       {"channels", mc.channels}};
  // The layout (may change on resume: checkpoint_layout_keys), then what may not.
  const comm::MeshShape mesh = s.mesh ? s.mesh->layout().shape() : comm::MeshShape{};
  id["ranks"] = s.world_size;
  id["dp"] = mesh.dp;
  id["sp"] = mesh.sp;
  id["zero_stage"] = s.store ? s.store->stage() : 0;
  id["tp"] = mesh.tp;
  id["pp"] = mesh.pp;
  id["pipeline_virtual_stages"] = config_.pipeline_virtual_stages;
  id["placement"] = describe_placement(config_);
  id["precision"] = dtype_name(working_dtype(config_));
  id["blocks_per_unit"] = config_.blocks_per_unit;
  id["micro_batch"] = config_.micro_batch_size;
  // Sequences per optimizer step: what must stay for the run to go on as it was.
  id["global_batch"] = config_.micro_batch_size * config_.gradient_accumulation_steps * mesh.dp;
  id["seq_len"] = config_.seq_len;
  id["gradient_accumulation_steps"] = config_.gradient_accumulation_steps;
  id["parameters"] = nn::ParamLayout(s.model_config).parameter_count();  // the whole model's
  return id;
}

namespace {

// What a checkpoint may be resumed under when it differs: the data-parallel (and Ulysses) world,
// the ZeRO stage, the placement, and the micro-batch (the global batch stays). The state is then
// read by ranges (CheckpointRanges).
const std::vector<std::string> kCheckpointLayoutKeys = {"ranks",      "dp",        "sp",
                                                        "zero_stage", "placement", "micro_batch"};

// The reference path's state per unit, named as the store names its blocks: the fp32 parameters
// (which are the master) and AdamW's moments, each a slice of a device buffer (total_numel fp32).
struct ReferenceBlock {
  std::string unit;
  const char* kind;
  float* device;  // (elems)
  size_t elems;
};

std::vector<ReferenceBlock> reference_blocks(const nn::ParamLayout& layout, size_t blocks_per_unit,
                                             nn::LocalParams& params, AdamWOptimizer* optimizer) {
  const UnitGrouping g = group_units(layout, blocks_per_unit);
  std::vector<ReferenceBlock> blocks;
  for (size_t u = 0; u < g.specs.size(); ++u) {
    const size_t at = g.start[u], n = g.specs[u].numel;
    blocks.push_back({g.specs[u].name, "params_full", params.params() + at, n});
    if (optimizer) {
      blocks.push_back({g.specs[u].name, "adam_m", optimizer->m() + at, n});
      blocks.push_back({g.specs[u].name, "adam_v", optimizer->v() + at, n});
    }
  }
  return blocks;
}

// A store block's kind as checkpoints name it (stable, unlike the report's display names).
std::string checkpoint_kind(zero::StateBuffer b) {
  switch (b) {
    case zero::StateBuffer::params_full:
      return "params_full";
    case zero::StateBuffer::param_shard:
      return "param_shard";
    case zero::StateBuffer::master:
      return "master";
    case zero::StateBuffer::adam_m:
      return "adam_m";
    case zero::StateBuffer::adam_v:
      return "adam_v";
    default:
      TZ_THROW(std::string("no checkpoint name for state ") + zero::state_buffer_name(b),
               "internal error: gradients are not checkpointed");
  }
}

// The checkpoint's kinds that hold a block kind's values, in order of preference: the fp32 master
// is the working parameters themselves where no separate master was kept.
std::vector<std::string> source_kinds(const std::string& kind) {
  if (kind == "params_full" || kind == "param_shard") return {"params_full", "param_shard"};
  if (kind == "master") return {"master", "params_full", "param_shard"};
  return {kind};
}

}  // namespace

std::string Trainer::save_training_checkpoint(int64_t steps_done, const LossScaler& scaler) {
  State& s = *state_;
  comm::Communicator* group = s.session && s.world_size > 1 ? &s.session->world() : nullptr;
  CheckpointWriter writer(config_.checkpoint.save_dir, steps_done, s.rank, group);
  ResumePoint point;
  point.step = steps_done;
  point.scaler = scaler.state();
  point.data = s.train_loader->position();
  const auto add = [&](const std::string& unit, const std::string& kind, size_t elem_bytes,
                       const std::string& tier, size_t begin, size_t elems, const void* data) {
    nlohmann::ordered_json meta;
    meta["unit"] = unit;
    meta["kind"] = kind;
    meta["dtype"] = block_dtype(config_, elem_bytes);
    meta["tier"] = tier;
    meta["begin"] = begin;  // global range [begin, begin + elems) in the unit
    meta["elems"] = elems;
    writer.add_block(unit + "." + kind, meta, data, elems * elem_bytes);
  };
  if (s.store) {
    const zero::PartitionPlan& plan = s.store->plan();
    s.store->save_state([&](const zero::PartitionStore::StateBlock& b, const void* data) {
      add(plan.units()[b.unit].name, checkpoint_kind(b.kind), b.elem_bytes, tier_name(b.tier),
          b.begin, b.elems, data);
    });
    point.steps_taken = s.store->steps_taken();
  } else {
    std::vector<float> host;  // (elems) fp32, one block at a time
    for (const ReferenceBlock& b :
         reference_blocks(s.layout(), static_cast<size_t>(config_.blocks_per_unit), *s.params,
                          s.optimizer.get())) {
      host.resize(b.elems);
      s.device->copy(host.data(), b.device, b.elems * sizeof(float), CopyKind::device_to_host,
                     s.device->default_stream());
      s.device->default_stream().synchronize();
      add(b.unit, b.kind, sizeof(float), "device", 0, b.elems, host.data());
    }
    point.steps_taken = s.optimizer ? s.optimizer->steps_taken() : 0;
  }
  // Where each tensor of this rank sits in the units its blocks hold.
  const nn::ParamLayout& layout = s.layout();
  const UnitGrouping g = group_units(layout, static_cast<size_t>(config_.blocks_per_unit));
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const nn::ParamTensor& t : layout.tensors()) {
    nlohmann::ordered_json j;
    j["tensor"] = t.name();
    j["unit"] = g.specs[g.store_unit[t.unit]].name;
    j["offset"] = g.offset[t.unit] + layout.offset_in_unit(t);  // elements in the unit
    std::vector<int64_t> shape;
    for (size_t d = 0; d < t.shape.rank(); ++d) shape.push_back(t.shape[d]);
    j["shape"] = shape;
    j["tp_rank"] = layout.tp().rank;
    j["tp_size"] = layout.tp().size;
    tensors.push_back(std::move(j));
  }
  return writer.commit(checkpoint_identity(), point,
                       static_cast<size_t>(config_.checkpoint.keep_last), tensors);
}

int64_t Trainer::resume_training(LossScaler& scaler) {
  State& s = *state_;
  CheckpointReader reader(config_.checkpoint.resume, s.rank, checkpoint_identity(),
                          kCheckpointLayoutKeys);
  std::unique_ptr<CheckpointRanges> ranges;
  if (!reader.same_layout()) {
    ranges = std::make_unique<CheckpointRanges>(reader.directory());
    log::info("resuming '" + reader.directory() +
              "' in another data-parallel layout, stage or placement: its state is resharded");
  }
  // One block, either in order from this rank's file or by range from every rank's.
  const auto read = [&](const std::string& unit, const std::string& kind, size_t elem_bytes,
                        size_t begin, size_t elems, void* data) {
    if (!ranges) return reader.read_block(unit + "." + kind, data, elems * elem_bytes);
    TZ_CHECK(ranges->read(unit, source_kinds(kind), block_dtype(config_, elem_bytes), begin, elems,
                          data),
             "checkpoint '" + reader.directory() + "' holds no " + kind + " state of unit " + unit,
             "resume from a checkpoint of this model written with optimizer states");
  };
  if (s.store) {
    const zero::PartitionPlan& plan = s.store->plan();
    s.store->load_state(
        [&](const zero::PartitionStore::StateBlock& b, void* data) {
          read(plan.units()[b.unit].name, checkpoint_kind(b.kind), b.elem_bytes, b.begin, b.elems,
               data);
        },
        reader.point().steps_taken);
  } else {
    TZ_CHECK(s.optimizer != nullptr || config_.steps == 0, "no optimizer to resume", "");
    std::vector<float> host;  // (elems) fp32
    for (const ReferenceBlock& b :
         reference_blocks(s.layout(), static_cast<size_t>(config_.blocks_per_unit), *s.params,
                          s.optimizer.get())) {
      host.resize(b.elems);
      read(b.unit, b.kind, sizeof(float), 0, b.elems, host.data());
      s.device->copy(b.device, host.data(), b.elems * sizeof(float), CopyKind::host_to_device,
                     s.device->default_stream());
      s.device->default_stream().synchronize();
    }
    if (s.optimizer) s.optimizer->set_steps_taken(reader.point().steps_taken);
  }
  scaler.restore(reader.point().scaler);
  if (!ranges) {
    reader.finish();
    s.train_loader->seek(reader.point().data);
  } else {
    // Another data-parallel world reads other windows: this replica starts dp_rank windows past
    // where the writer's first replica was (the runs differ from here on, as any change of the
    // data-parallel size makes them).
    s.train_loader->seek_from_first_rank(ranges->first_rank_data());
  }
  return reader.point().step;
}

TrainResult Trainer::run(std::FILE* out, const std::string& metrics_path,
                         const std::string& memory_json_path) {
  // Under mpiexec a rank that throws must not leave the others waiting in a collective until
  // their timeout: end the whole job with the message.
  if (!state_->session || state_->world_size == 1)
    return run_loop(out, metrics_path, memory_json_path);
  try {
    return run_loop(out, metrics_path, memory_json_path);
  } catch (const Error& e) {
    comm::abort_job(e.what());
  }
}

TrainResult Trainer::run_loop(std::FILE* all_ranks_out, const std::string& metrics_path,
                              const std::string& memory_json_path) {
  State& s = *state_;
  const auto B = static_cast<size_t>(config_.micro_batch_size);
  const auto T = static_cast<size_t>(config_.seq_len);
  const int64_t accum = config_.gradient_accumulation_steps;
  comm::Communicator* group = s.session ? &s.session->world() : nullptr;
  nn::ParamProvider& params =
      s.store ? static_cast<nn::ParamProvider&>(*s.store_params) : *s.params;
  // Progress, validation and checkpoint messages come from rank 0 only; they are global values.
  std::FILE* out = s.rank == 0 ? all_ranks_out : nullptr;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics(nullptr, &std::fclose);
  if (!metrics_path.empty() && s.rank == 0) {
    metrics.reset(std::fopen(metrics_path.c_str(), "w"));
    TZ_CHECK(metrics != nullptr,
             "cannot open the metrics file '" + metrics_path + "': " + std::strerror(errno),
             "check that the directory exists and is writable");
  }
  LrSchedule schedule(config_.scheduler, config_.optimizer.lr, config_.steps);
  TrainResult result;
  result.unigram_entropy = s.unigram_entropy;
  result.parameter_count = nn::ParamLayout(s.model_config).parameter_count();  // whole model
  result.device_name = s.device->name();
  result.rank = s.rank;
  result.val_loss = std::numeric_limits<double>::quiet_NaN();
  if (out) {
    std::fprintf(out,
                 "tierzero train: GPT-2 %s, %zu parameters, device %s, batch %zu x %zu x %lld "
                 "accumulation, %lld steps",
                 s.model_config.str().c_str(), result.parameter_count, result.device_name.c_str(),
                 B, T, static_cast<long long>(accum), static_cast<long long>(config_.steps));
    if (s.store)
      std::fprintf(out, ", ZeRO stage %d on %d rank(s), %s", s.store->stage(), s.world_size,
                   describe_placement(config_).c_str());
    if (s.store && config_.communication_data_type != "fp32")
      std::fprintf(out, ", gradients reduced in %s", config_.communication_data_type.c_str());
    if (s.model->tensor_parallel() > 1)
      std::fprintf(out, ", dp %d x tensor-parallel %zu%s (%zu parameters per rank)", s.dp_size,
                   s.model->tensor_parallel(),
                   s.model->sequence_parallel() ? " with sequence parallelism" : "",
                   s.model->layout().parameter_count());
    if (s.model->ulysses() > 1)
      std::fprintf(out, ", dp %d x Ulysses %zu (%zu of each sequence's %zu positions per rank)",
                   s.dp_size, s.model->ulysses(), T / s.model->ulysses(), T);
    if (config_.pipeline_parallel > 1) {
      std::fprintf(out, ", pipeline-parallel %lld (%s",
                   static_cast<long long>(config_.pipeline_parallel),
                   config_.pipeline_schedule.c_str());
      if (!s.more_chunks.empty())
        std::fprintf(out, ", %zu virtual stages per rank", s.more_chunks.size() + 1);
      for (const nn::GPT* m : s.chunk_models()) std::fprintf(out, "; %s", m->stage().str().c_str());
      std::fprintf(out, ")");
    }
    if (config_.activation_checkpointing) std::fprintf(out, ", activation checkpointing");
    std::fprintf(out, "\n");
  }

  std::unique_ptr<profile::ProfileRecorder> recorder;
  std::unique_ptr<ProfilingProvider> profiled;
  if (!profile_path_.empty()) {
    recorder = make_recorder(config_, profile_timeline_, s.chunk_models(), s.layout(),
                             s.store.get(), s.store_params ? &s.store_params->grouping() : nullptr,
                             s.rank, s.world_size, s.allocator->stats().budget, *s.device);
    profiled = std::make_unique<ProfilingProvider>(params, *recorder);
  }
  nn::ParamProvider& step_params = profiled ? static_cast<nn::ParamProvider&>(*profiled) : params;
  // Pipeline parallelism: the stage's micro-batches (gradient_accumulation_steps of them) run in
  // the schedule's order with the transfers between stages.
  std::unique_ptr<PipelineExecutor> pipe;
  if (config_.pipeline_parallel > 1)
    pipe = std::make_unique<PipelineExecutor>(
        s.chunk_models(), s.chunk_units, s.pipeline,
        nn::pipeline_schedule_from_name(config_.pipeline_schedule), static_cast<size_t>(accum), B,
        T);
  if (pipe) pipe->set_receive_ahead(config_.pipeline_receive_ahead);
  if (pipe && profiled)
    pipe->on_action([&](const nn::PipelineAction& a) {
      profiled->begin_pass(a.kind == nn::PipelineAction::Kind::forward ? profile::Phase::forward
                                                                       : profile::Phase::backward);
    });
  // (micro-batches, B, T) inputs and targets of a pipeline step
  std::vector<std::vector<int32_t>> xs(pipe ? static_cast<size_t>(accum) : 0,
                                       std::vector<int32_t>(B * T));
  std::vector<std::vector<int32_t>> ys(xs);
  double pipeline_span_s = 0.0;  // the last step's pipeline, start to the last stage's end

  LossScaler scaler(config_.fp16_scaling, config_.fp16);
  // One run saves into a directory at a time: a second one is refused here, before any step.
  const SaveDirLock save_dir_lock(config_.checkpoint.save_dir, s.rank, group);
  const int64_t first_step = config_.checkpoint.resume.empty() ? 0 : resume_training(scaler);
  if (s.rank == 0 && !config_.checkpoint.save_dir.empty())
    warn_abandoned_checkpoints(config_.checkpoint.save_dir, first_step,
                               static_cast<size_t>(config_.checkpoint.keep_last));
  if (out && first_step > 0)
    std::fprintf(out, "resumed after step %lld from '%s'\n", static_cast<long long>(first_step),
                 config_.checkpoint.resume.c_str());
  // SIGTERM / SIGINT with a checkpoint directory: finish the step, save, stop (exit 0).
  const bool saving = !config_.checkpoint.save_dir.empty();
  const StopSignals stop_signals(saving);
  // Steps done at the last checkpoint written (or resumed from: not written again).
  int64_t saved_at = config_.checkpoint.resume.empty() ? -1 : first_step;
  int64_t steps_done = first_step;
  bool stopped = false;                     // by a stop signal
  std::vector<int32_t> x(B * T), y(B * T);  // (B, T) inputs and targets
  for (int64_t step = first_step; step < config_.steps; ++step) {
    Timer timer;
    const double cpu_at_start = process_cpu_seconds();
    if (recorder) recorder->begin_step(step + 1);
    for (nn::GPT* m : s.chunk_models()) {
      m->reset_tensor_parallel_traffic();
      m->reset_ulysses_traffic();
    }
    if (s.store)
      s.store->zero_grads();
    else
      s.params->zero_grads();
    double loss = 0.0;
    // fp16: the gradients carry the loss scale; the store divides it out.
    const auto grad_scale = static_cast<float>(scaler.scale() / static_cast<double>(accum));
    if (pipe) {
      for (int64_t micro = 0; micro < accum; ++micro)
        s.train_loader->next_batch(xs[static_cast<size_t>(micro)].data(),
                                   ys[static_cast<size_t>(micro)].data());
      if (profiled) profiled->begin_pass(profile::Phase::forward);
      const double pipe_start = monotonic_seconds();
      loss = pipe->train(step_params, xs, ys, grad_scale);  // the last stage's; 0 elsewhere
      if (!metrics_path.empty()) {
        // The pipeline's step ends when its last stage is done (the first stage's drain ends
        // it, not this stage's last send): a barrier, only when the bubble is measured.
        s.mesh->group(comm::MeshDim::pp).barrier();
        pipeline_span_s = monotonic_seconds() - pipe_start;
      }
    } else {
      for (int64_t micro = 0; micro < accum; ++micro) {
        s.train_loader->next_batch(x.data(), y.data());
        if (profiled) profiled->begin_pass(profile::Phase::forward);
        loss += static_cast<double>(
            s.model->forward_backward(step_params, x.data(), y.data(), B, T, grad_scale));
      }
      loss /= static_cast<double>(accum);
    }
    if (recorder) {
      recorder->set_phase(profile::Phase::optimizer);
      recorder->set_unit(-1);
    }
    // The schedule follows the optimizer's steps, which an fp16 step skipped on overflow does
    // not advance (as DeepSpeed skips its scheduler step); a checkpoint saves that count.
    const double lr = schedule.lr(s.store ? s.store->steps_taken() : s.optimizer->steps_taken());
    double grad_norm = 0.0;
    if (s.store) {
      const zero::StoreStepStats st = s.store->step(lr, config_.gradient_clipping, scaler.scale());
      grad_norm = st.grad_norm;
      if (st.skipped && out)
        std::fprintf(out, "step %lld: gradient overflow at loss scale %g, step skipped\n",
                     static_cast<long long>(step + 1), scaler.scale());
      scaler.update(st.skipped);
      // Every rank's loss is the mean over its own tokens, and every rank has as many: the
      // global loss is the mean over ranks (a tensor-parallel group's ranks hold the same one;
      // only the last pipeline stage has one, the others add 0).
      float sum = static_cast<float>(loss);
      group_sum(*group, &sum, 1);
      loss = static_cast<double>(sum) /
             static_cast<double>(s.world_size / static_cast<int>(config_.pipeline_parallel));
    } else {
      grad_norm = s.optimizer->step(*s.params, lr, config_.gradient_clipping).grad_norm;
    }
    s.device->default_stream().synchronize();
    StepRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = grad_norm;
    r.seconds = timer.seconds();
    r.cpu_seconds = std::max(0.0, process_cpu_seconds() - cpu_at_start);
    r.tokens_per_second =
        static_cast<double>(B * T * static_cast<size_t>(accum) * static_cast<size_t>(s.dp_size)) /
        r.seconds;
    if (s.store && s.store->stage() == 3) {
      const zero::FetchCounters& fc = s.store->fetch_counters();
      r.fetch_counted = true;
      r.prefetch_hits = fc.prefetch_hits;
      r.on_demand_fetches = fc.on_demand_fetches;
      r.stall_s = fc.stall_s;
      r.nvme_reads = fc.nvme_reads;
      r.handoffs = fc.handoffs;
    }
    if (s.store) {
      const zero::FetchCounters& fc = s.store->fetch_counters();
      r.reductions = fc.reductions;
      r.reduction_s = fc.reduction_s;
      r.reduction_exposed_s = fc.reduction_exposed_s;
    }
    result.steps.push_back(r);
    if (recorder) {
      profile::StepCounters counters;
      counters.prefetch_hits = r.prefetch_hits;
      counters.on_demand_fetches = r.on_demand_fetches;
      counters.stall_s = r.stall_s;
      counters.step_s = r.seconds;
      counters.loss = r.loss;
      counters.tokens = B * T * static_cast<size_t>(accum);
      counters.reductions = r.reductions;
      counters.reduction_s = r.reduction_s;
      counters.reduction_exposed_s = r.reduction_exposed_s;
      recorder->end_step(counters);
    }
    print_step_line(out, r, config_.steps, MemoryTracker::global());
    // Pipeline: the stages' bubble this step (the part of the pipeline's span each stage did not
    // compute), averaged over the stages, and stage 0's times; for --metrics (every rank is given
    // the path, so all take part in the sum).
    float bubble[2] = {0.0f, 0.0f};  // (sum of the stages' bubble fractions, stages)
    if (pipe && !metrics_path.empty()) {
      const PipelineExecutor::StepTiming& t = pipe->last_step();
      bubble[0] =
          pipeline_span_s > 0.0 ? static_cast<float>(1.0 - t.compute_s / pipeline_span_s) : 0.0f;
      bubble[1] = 1.0f;
      group_sum(s.mesh->group(comm::MeshDim::pp), bubble, 2);
    }
    if (metrics) {
      // The tensor-parallel collectives' payload this step (rank 0's; every tp rank moves as
      // much), all zero without tensor parallelism.
      nn::TensorParallelTraffic tp{};
      for (const nn::GPT* m : s.chunk_models()) {
        const nn::TensorParallelTraffic t = m->tensor_parallel_traffic();
        tp.all_reduce_bytes += t.all_reduce_bytes;
        tp.all_gather_bytes += t.all_gather_bytes;
        tp.reduce_scatter_bytes += t.reduce_scatter_bytes;
        tp.calls += t.calls;
      }
      // Valid JSON whatever the values: a non-finite loss or gradient norm is written as null.
      nlohmann::ordered_json line = step_metrics_json(
          r, tp, s.model->ulysses_traffic().all_to_all_bytes, s.model->ulysses_traffic().calls);
      if (pipe) {
        // Stage 0's times (this rank's) and the bubble averaged over the stages.
        const PipelineExecutor::StepTiming& t = pipe->last_step();
        line["pp_bubble"] = static_cast<double>(bubble[0] / bubble[1]);
        line["pp_step_ms"] = pipeline_span_s * 1e3;
        line["pp_compute_ms"] = t.compute_s * 1e3;
        line["pp_wait_ms"] = t.wait_s * 1e3;
        line["pp_receives"] = t.receives;
        line["pp_posted_ahead"] = t.posted_ahead;
      }
      const std::string text = line.dump() + "\n";
      TZ_CHECK(std::fputs(text.c_str(), metrics.get()) >= 0 && std::fflush(metrics.get()) == 0,
               "writing the metrics file '" + metrics_path + "' failed: " + std::strerror(errno),
               "check free disk space");
    }
    if (s.val_loader && config_.val_every > 0 && (step + 1) % config_.val_every == 0 &&
        step + 1 < config_.steps && config_.val_batches > 0) {
      double v =
          validate(*s.model, params, s.store.get(), pipe.get(), *s.val_loader,
                   static_cast<size_t>(config_.val_batches), B, T, s.dp_rank, s.dp_size, group);
      if (out)
        std::fprintf(out, "val loss %.4f at step %lld\n", v, static_cast<long long>(step + 1));
    }
    steps_done = step + 1;
    if (saving) {
      // Every rank stops after the same step: a signal on any rank stops all.
      float stop = StopSignals::requested() ? 1.0f : 0.0f;
      if (group) group_sum(*group, &stop, 1);
      const int64_t every = config_.checkpoint.save_every;
      if (stop > 0.0f || (every > 0 && steps_done % every == 0)) {
        const std::string where = save_training_checkpoint(steps_done, scaler);
        saved_at = steps_done;
        if (out) std::fprintf(out, "saved training checkpoint '%s'\n", where.c_str());
      }
      if (stop > 0.0f) {
        stopped = true;
        if (out)
          std::fprintf(out,
                       "stopping after step %lld on a stop signal (the checkpoint resumes it)\n",
                       static_cast<long long>(steps_done));
        break;
      }
    }
  }
  if (saving && saved_at != steps_done) {
    const std::string where = save_training_checkpoint(steps_done, scaler);
    if (out) std::fprintf(out, "saved training checkpoint '%s'\n", where.c_str());
  }
  if (s.val_loader && config_.val_batches > 0 && !stopped) {
    result.val_loss =
        validate(*s.model, params, s.store.get(), pipe.get(), *s.val_loader,
                 static_cast<size_t>(config_.val_batches), B, T, s.dp_rank, s.dp_size, group);
    // One write for the whole line: other ranks' output may share the terminal.
    char line[160];
    if (std::isfinite(s.unigram_entropy))
      std::snprintf(line, sizeof line, "val loss %.4f (unigram entropy of the corpus: %.4f nats)\n",
                    result.val_loss, s.unigram_entropy);
    else
      std::snprintf(line, sizeof line, "val loss %.4f\n", result.val_loss);
    if (out) std::fputs(line, out);
  }
  if (!config_.save_checkpoint.empty()) {
    save_model_streamed();
    if (out) std::fprintf(out, "saved checkpoint '%s'\n", config_.save_checkpoint.c_str());
  }
  if (!memory_json_path.empty()) {
    nlohmann::ordered_json sections = nlohmann::ordered_json::object();
    if (pipe) sections["pipeline"] = pipeline_memory_json(*pipe, s.chunk_models(), config_, B, T);
    if (s.model->ulysses() > 1) sections["ulysses"] = ulysses_memory_json(*s.model, config_, B, T);
    write_memory_json(memory_json_path, s.rank, s.world_size, sections);
  }
  if (recorder) {
    // Every rank has a recorder (each is given the path), so all take part in the broadcast.
    profile::RunInfo identity = recorder->profile().run;
    identity.run_id = shared_run_id(group);
    identity.host = host_name();
    recorder->set_run_info(std::move(identity));
    const std::string file = profile::rank_profile_path(profile_path_, s.rank);
    recorder->write_json(file);
    if (out) std::fprintf(out, "wrote profile '%s'\n", file.c_str());
  }
  if (s.world_size > 1 && all_ranks_out) {
    // Rank by rank (barriers between), so that the summaries usually arrive in rank order; every
    // rank gets the same `out` (null or not), so all or none take part.
    for (int r = 0; r < s.world_size; ++r) {
      if (r == s.rank) print_rank_memory_summary(all_ranks_out, s.rank, MemoryTracker::global());
      group->barrier();
    }
  } else {
    print_memory_summary(out, MemoryTracker::global());
  }
  return result;
}

}  // namespace tierzero::train
