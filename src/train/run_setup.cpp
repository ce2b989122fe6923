// Run setup (run_setup.hpp): the session, the run's shape, data, device, process groups, model
// chunks and initial values, each built by one function.
#include "run_setup.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tierzero/comm/nccl_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/nn/pp/pipeline_cut.hpp"
#include "tierzero/nn/pp/pipeline_schedule.hpp"
#include "tierzero/nn/tp/tensor_parallel_params.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/config_bridges.hpp"
#include "tierzero/train/hf_directory.hpp"
#include "tierzero/train/placement_from_config.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/synthetic_corpus.hpp"
#include "tierzero/train/token_shards.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kBuiltinCorpusTokens = 2000000;
constexpr size_t kBuiltinValTokens = 200000;

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
  // The plain divisibility checks (heads, vocabulary, tokens) first; then the layout names any
  // tensor extent that still does not split.
  (void)nn::ActivationDims::of(model, static_cast<size_t>(c.micro_batch_size),
                               static_cast<size_t>(c.seq_len), tp, c.sequence_parallel, u);
  (void)nn::gpt_param_layout(model, nn::TensorParallel{tp, 0});
  if (c.sequence_parallel && tp == 1)
    log::warn(
        "tierzero.sequence_parallel has no effect without tensor parallelism "
        "(tensor_parallel is 1)");
  return stages;
}

}  // namespace

void check_supported(const TrainConfig& c) {
  // From the config or the command line alike: a resumed run's weights are the checkpoint's.
  TZ_CHECK(c.load_checkpoint.empty() || c.checkpoint.resume.empty(),
           "a model to start from ('" + c.load_checkpoint +
               "', --load) and a checkpoint to resume ('" + c.checkpoint.resume +
               "', --resume / tierzero.checkpoint.resume) are both given",
           "give one: a resumed run continues the checkpoint's weights");
  TZ_CHECK(!c.checkpoint.reset_lr_schedule || !c.checkpoint.resume.empty(),
           "--reset-lr-schedule (tierzero.checkpoint.reset_lr_schedule) without a checkpoint to "
           "resume",
           "it only applies with --resume (tierzero.checkpoint.resume)");
  TZ_CHECK(c.zero.stage >= 0 && c.zero.stage <= 3,
           "zero_optimization.stage " + std::to_string(c.zero.stage) + " does not exist",
           "use a stage from 0 to 3");
  // (The config reader says these too; the command line's --stage and --offload-* come after it.)
  if (c.zero.offload_param.device != "none" && c.zero.stage != 3)
    TZ_THROW(
        "zero_optimization.offload_param needs stage 3 (parameters are only partitioned in "
        "stage 3; stage is " +
            std::to_string(c.zero.stage) + ")",
        "set zero_optimization.stage (--stage) to 3, or offload_param (--offload-param) to "
        "none");
  if (c.zero.offload_optimizer.device != "none" && c.zero.stage == 0)
    TZ_THROW("zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)",
             "set zero_optimization.stage to 1 or more, or offload_optimizer.device to none");
  check_offload_gradients(c);
}

RunSession open_session(const TrainConfig& c) {
  RunSession run;
  // The reference path stays exactly the one-rank loop; anything else goes through the store.
  // The whole world is the data-parallel (partition) group for now.
  // 16-bit working parameters live in the store (the reference path is fp32 only).
  if (c.zero.stage > 0 || comm::launched_by_mpi() || c.bf16 || c.fp16 || c.tensor_parallel > 1 ||
      c.pipeline_parallel > 1 || c.ulysses_parallel > 1) {
    run.session = std::make_unique<comm::MpiSession>(nullptr, nullptr);
    run.rank = run.session->rank();
    run.world_size = run.session->size();
    log::set_rank(run.rank, run.world_size);
  }
  return run;
}

RunShape plan_run_shape(const TrainConfig& c, int rank, int world_size) {
  RunShape s;
  s.model = gpt_config_from(c.model);
  if (!c.load_checkpoint.empty()) {
    s.model = is_hf_directory(c.load_checkpoint) ? read_hf_directory_config(c.load_checkpoint)
              : is_safetensors_path(c.load_checkpoint)
                  ? read_gpt2_safetensors_config(c.load_checkpoint)
                  : read_checkpoint_config(c.load_checkpoint);
    log::info("model shape from checkpoint '" + c.load_checkpoint + "': " + s.model.str());
  }
  const auto T = static_cast<size_t>(c.seq_len);
  TZ_CHECK(T <= s.model.max_seq_len,
           "seq_len " + std::to_string(T) + " exceeds the model's context length " +
               std::to_string(s.model.max_seq_len),
           "lower tierzero.seq_len");
  s.stages = check_parallel(c, s.model, world_size);
  s.mesh.tp = static_cast<int>(c.tensor_parallel);
  s.mesh.pp = static_cast<int>(c.pipeline_parallel);
  s.mesh.sp = static_cast<int>(c.ulysses_parallel);
  s.mesh.dp = world_size / (s.mesh.tp * s.mesh.pp * s.mesh.sp);
  s.coords = comm::MeshLayout(s.mesh).coords(rank);
  s.dp_rank = s.coords[static_cast<size_t>(comm::MeshDim::dp)];
  s.dp_size = s.mesh.dp;
  // The rank's chunks: virtual stages pp_rank, pp_rank + pp, ... (one at gpipe and 1f1b).
  s.chunk_stages = nn::rank_chunks(s.stages, static_cast<size_t>(s.mesh.pp), s.pp_rank());
  return s;
}

RunData open_data(const TrainConfig& c, const RunShape& shape) {
  const auto B = static_cast<size_t>(c.micro_batch_size);
  const auto T = static_cast<size_t>(c.seq_len);
  const size_t V = shape.model.vocab_size;
  const int dp_rank = shape.dp_rank, dp_size = shape.dp_size;
  RunData d;
  if (c.train_data.empty()) {
    TZ_CHECK(
        V >= static_cast<size_t>(kByteVocabSize),
        "the built-in corpus needs vocab_size >= 257 (bytes + EOT), model has " + std::to_string(V),
        "give training data with --data or raise model.vocab_size");
    std::vector<uint16_t> corpus = synthetic_corpus(kBuiltinCorpusTokens);
    std::vector<uint16_t> val(corpus.end() - kBuiltinValTokens, corpus.end());
    corpus.resize(corpus.size() - kBuiltinValTokens);
    d.unigram_entropy = unigram_entropy(corpus, V);
    std::vector<std::unique_ptr<TokenShard>> train, held_out;
    train.push_back(make_memory_shard("built-in corpus (train)", std::move(corpus)));
    held_out.push_back(make_memory_shard("built-in corpus (val)", std::move(val)));
    d.train = std::make_unique<DataLoader>(std::move(train), B, T, V, dp_rank, dp_size);
    if (c.val_data.empty())
      d.val = std::make_unique<DataLoader>(std::move(held_out), B, T, V, dp_rank, dp_size);
  } else {
    d.train =
        std::make_unique<DataLoader>(open_token_shards(c.train_data), B, T, V, dp_rank, dp_size);
  }
  if (!c.val_data.empty())
    d.val = std::make_unique<DataLoader>(open_token_shards(c.val_data), B, T, V, dp_rank, dp_size);
  // What validation will read, checked now: a token out of the vocabulary found only at the
  // first validation would end the run after training (with nothing run before it, as in eval,
  // validation reads it first anyway).
  // (At most the batches the data holds: validation never reads past them, validate().)
  if (d.val && c.val_batches > 0 && c.steps > 0)
    d.val->check_batches(
        std::min((static_cast<size_t>(c.val_batches) + static_cast<size_t>(dp_size) - 1) /
                     static_cast<size_t>(dp_size),
                 d.val->batches_per_epoch()));
  return d;
}

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

ProcessGroups open_groups(const RunShape& shape, const RunSession& run, Device& device) {
  ProcessGroups g;
  if (!run.session) return g;
  const comm::MeshShape& mesh = shape.mesh;
  g.mesh = std::make_unique<comm::ProcessMesh>(run.session->world(), mesh);
  g.tensor_parallel = &g.mesh->group(comm::MeshDim::tp);
  g.pipeline = &g.mesh->group(comm::MeshDim::pp);
  const bool cuda = device.kind() == DeviceKind::cuda;
  // The model's collectives and transfers run on its device buffers.
  if (cuda && mesh.tp > 1) {
    g.tensor_parallel_nccl = comm::make_nccl_communicator(g.mesh->group(comm::MeshDim::tp), device);
    g.tensor_parallel = g.tensor_parallel_nccl.get();
  }
  // Ulysses' all-to-alls, over the ranks that share a data-parallel replica's sequences.
  if (mesh.sp > 1) {
    g.ulysses = &g.mesh->group(comm::MeshDim::sp);
    if (cuda) {
      g.ulysses_nccl = comm::make_nccl_communicator(g.mesh->group(comm::MeshDim::sp), device);
      g.ulysses = g.ulysses_nccl.get();
    }
  }
  TZ_CHECK(!cuda || shape.chunk_stages.size() == 1,
           "pipeline_schedule interleaved on CUDA is not supported yet: NCCL matches "
           "point-to-point transfers by their order, and the interleaved executor sends "
           "activations and gradients between the same two ranks in orders that need tags",
           "use 1f1b or gpipe on CUDA, or run interleaved on the CPU backend");
  if (cuda && mesh.pp > 1) {
    g.pipeline_nccl = comm::make_nccl_communicator(g.mesh->group(comm::MeshDim::pp), device);
    g.pipeline = g.pipeline_nccl.get();
  }
  if (mesh.pp > 1) {
    // The first and the last stage (of one dp replica and tp rank) share the embeddings' unit:
    // its gradients are summed over the two. Every rank takes part in the split; the middle
    // stages get a group of their own, unused.
    const size_t pp_rank = shape.pp_rank();
    const bool ends = pp_rank == 0 || pp_rank + 1 == static_cast<size_t>(mesh.pp);
    const int key = shape.coords[static_cast<size_t>(comm::MeshDim::pp)];
    const int color =
        ends ? shape.dp_rank * mesh.tp + shape.coords[static_cast<size_t>(comm::MeshDim::tp)]
             : run.world_size + run.rank;
    g.tie_mpi = run.session->world().split(color, key, "tie");
    if (ends) g.tie = g.tie_mpi.get();
    if (ends && cuda) {
      g.tie_nccl = comm::make_nccl_communicator(*g.tie_mpi, device);
      g.tie = g.tie_nccl.get();
    }
  }
  g.partition = &g.mesh->partition_group();
  if (cuda && g.mesh->partition_group().size() > 1) {
    // Device buffers go to NCCL directly instead of being staged through host memory for MPI.
    g.partition_nccl = comm::make_nccl_communicator(g.mesh->partition_group(), device);
    g.partition = g.partition_nccl.get();
  }
  return g;
}

zero::StoreGroups ProcessGroups::store_groups() const {
  // The gradient norm covers the whole model: summed over the tensor-parallel group, where the
  // replicated tensors (equal on every tp rank) count once, and over the pipeline's stages,
  // where the embeddings the first and last stage share count once.
  zero::StoreGroups groups;
  const comm::MeshShape shape = mesh->layout().shape();
  if (shape.tp > 1) {
    groups.model_parallel.push_back(tensor_parallel);
    groups.replica = tensor_parallel;
  }
  if (shape.pp > 1) groups.model_parallel.push_back(pipeline);
  groups.tie = tie;
  return groups;
}

std::vector<nn::GPT*> ModelChunks::all() const {
  std::vector<nn::GPT*> chunks = {model.get()};
  for (const auto& m : more) chunks.push_back(m.get());
  return chunks;
}

ModelChunks build_model_chunks(const TrainConfig& c, const RunShape& shape,
                               const ProcessGroups& groups, DeviceAllocator& allocator,
                               DType compute) {
  nn::ModelParallel parallel;
  parallel.sequence_parallel = c.sequence_parallel;
  parallel.pipeline = shape.chunk_stages.front();
  parallel.tensor_parallel = groups.tensor_parallel;
  parallel.ulysses = groups.ulysses;
  ModelChunks m;
  m.model = std::make_unique<nn::GPT>(shape.model, allocator, parallel);
  if (shape.chunk_stages.size() > 1) {
    for (size_t k = 1; k < shape.chunk_stages.size(); ++k) {
      nn::ModelParallel chunk = parallel;
      chunk.pipeline = shape.chunk_stages[k];
      m.more.push_back(std::make_unique<nn::GPT>(shape.model, allocator, chunk));
      m.more.back()->share_scratch(*m.model);  // one action at a time: one scratch
    }
    m.chunks_layout = std::make_unique<nn::ParamLayout>(
        nn::chunks_param_layout(shape.model, shape.chunk_stages, m.model->layout().tp()));
    m.chunk_units = nn::chunk_unit_offsets(shape.model, shape.chunk_stages);
  }
  const nn::Recompute recompute = nn::Recompute::parse(c.recompute, "tierzero.recompute");
  for (nn::GPT* chunk : m.all()) {
    chunk->set_recompute(recompute);
    chunk->set_compute(compute);
  }
  return m;
}

InitialValues::InitialValues(const TrainConfig& c, const nn::GPTConfig& model,
                             const nn::ParamLayout& layout, const nn::PipelineStage& stage) {
  // Every rank creates only what it keeps: the store asks for each unit's or shard's elements
  // alone, straight into their tier, and no rank builds the whole model.
  if (c.load_checkpoint.empty()) {
    fn_ = [&layout, &model, seed = c.seed](size_t begin, size_t count, float* out) {
      nn::init_gpt2_range(layout, model, seed, begin, count, out);
    };
    return;
  }
  file_layout_ = std::make_unique<nn::ParamLayout>(nn::gpt_param_layout(model));
  file_ = open_model_ranges(c.load_checkpoint, *file_layout_);
  ModelRanges* file = file_.get();
  const nn::ParamLayout* file_layout = file_layout_.get();
  if (layout.tp().size == 1 && stage.stages == 1) {
    fn_ = [file](size_t begin, size_t count, float* out) { file->read(begin, count, out); };
    return;
  }
  // A tensor's runs are read together (ModelRanges::read_runs): a row-parallel piece is a
  // part of every row, which read run by run would cost a read per row.
  fn_ = [file, file_layout, &layout](size_t begin, size_t count, float* out) {
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

InitialValues::~InitialValues() = default;

}  // namespace tierzero::train
