// Run setup: everything a training run is made of before its first step, each piece built by one
// function, in the order the trainer builds them: the MPI session, the model's shape and its
// parallel split (checked before anything is allocated), the data loaders (a bad path fails
// before any large allocation), the device, the process groups (mesh, NCCL wrappings, the tie
// group), the model chunks and where the initial values come from. The parameter state (the
// reference path's or the partition store) is built on top of it (param_state.hpp). Private to
// src/train.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "tierzero/comm/mesh.hpp"
#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/zero/store_config.hpp"

namespace tierzero::train {

// Settings no path supports, before anything is built (the same message on every rank).
void check_supported(const TrainConfig& c);

// The MPI session of a run and this rank's place in it. The reference path (one rank, stage 0,
// fp32, no model parallelism, not under a launcher) has none.
struct RunSession {
  std::unique_ptr<comm::MpiSession> session;
  int rank = 0;
  int world_size = 1;
  comm::Communicator* world() const { return session ? &session->world() : nullptr; }
};
RunSession open_session(const TrainConfig& c);

// The model's shape (the config's, or a checkpoint's) and its pipeline's (virtual) stages, the
// parallel split checked against the world and the model; and this rank's coordinates in the
// mesh, known before any group exists.
struct RunShape {
  nn::GPTConfig model;
  std::vector<nn::PipelineStage> stages;        // every virtual stage of the pipeline
  std::vector<nn::PipelineStage> chunk_stages;  // this rank's: pp_rank, pp_rank + pp, ...
  comm::MeshShape mesh;
  comm::MeshCoord coords{};
  int dp_rank = 0;  // this rank's data-parallel replica (ranks of one tp, pp or sp group share)
  int dp_size = 1;
  size_t pp_rank() const {
    return static_cast<size_t>(coords[static_cast<size_t>(comm::MeshDim::pp)]);
  }
};
RunShape plan_run_shape(const TrainConfig& c, int rank, int world_size);

// The training (and validation) batches of this data-parallel replica.
struct RunData {
  std::unique_ptr<DataLoader> train;
  std::unique_ptr<DataLoader> val;                                    // null: no validation data
  double unigram_entropy = std::numeric_limits<double>::quiet_NaN();  // built-in corpus only
};
RunData open_data(const TrainConfig& c, const RunShape& shape);

// The configured device; "cuda" without an index under a launcher with several ranks is the GPU
// of the rank's node-local rank (round robin over the node's GPUs), so ranks do not share one.
std::unique_ptr<Device> open_device(const TrainConfig& c, comm::MpiSession* session);

// Every process group of the run (Megatron's parallel_state): the mesh (dp x tp x pp x sp) and,
// on CUDA with several ranks, NCCL wrappings of the groups that move device buffers. Declared
// after the device in the trainer's state: an NCCL communicator frees device memory and its
// stream when it goes, before the device does. Empty on the reference path.
struct ProcessGroups {
  std::unique_ptr<comm::ProcessMesh> mesh;
  std::unique_ptr<comm::Communicator> partition_nccl;
  std::unique_ptr<comm::Communicator> tensor_parallel_nccl;
  std::unique_ptr<comm::Communicator> ulysses_nccl;
  std::unique_ptr<comm::Communicator> pipeline_nccl;
  // The group the first and last stage share the tied embeddings over (null on the other stages).
  std::unique_ptr<comm::MpiCommunicator> tie_mpi;
  std::unique_ptr<comm::Communicator> tie_nccl;
  comm::Communicator* tie = nullptr;
  comm::Communicator* tensor_parallel = nullptr;  // the model's groups, NCCL where wrapped
  comm::Communicator* ulysses = nullptr;
  comm::Communicator* pipeline = nullptr;
  comm::Communicator* partition = nullptr;  // the store's (dp x sp)
  // The groups the store sums the gradient norm over, and its replica and tie groups.
  zero::StoreGroups store_groups() const;
};
ProcessGroups open_groups(const RunShape& shape, const RunSession& run, Device& device);

// The rank's model chunks: chunk 0 is the whole model at pp 1; the interleaved schedule's further
// chunks (virtual stages s + p, s + 2p, ...) share its scratch.
struct ModelChunks {
  std::unique_ptr<nn::GPT> model;  // chunk 0
  std::vector<std::unique_ptr<nn::GPT>> more;
  // The rank's layout over all its chunks and where each chunk's units start; empty at one chunk.
  std::unique_ptr<nn::ParamLayout> chunks_layout;
  std::vector<size_t> chunk_units;
  // The rank's parameters: its chunks' (one chunk: the model's layout).
  const nn::ParamLayout& layout() const { return chunks_layout ? *chunks_layout : model->layout(); }
  std::vector<nn::GPT*> all() const;
};
// compute: the dtype their products run in (compute_dtype_for).
ModelChunks build_model_chunks(const TrainConfig& c, const RunShape& shape,
                               const ProcessGroups& groups, DeviceAllocator& allocator,
                               DType compute);

// Where the initial fp32 values of the rank's layout come from: counter-based draws from the
// seed, or the checkpoint's values read by range (a model file is read as a piece of the file's
// one-rank layout: this rank's tp pieces, its pipeline stage's tensors). Every rank gets the same
// values for the same elements, at any world size, so no broadcast is needed.
class InitialValues {
 public:
  // `layout` (the rank's, over its chunks) and `model` must outlive it; `stage`: chunk 0's.
  InitialValues(const TrainConfig& c, const nn::GPTConfig& model, const nn::ParamLayout& layout,
                const nn::PipelineStage& stage);
  ~InitialValues();
  // Elements [begin, begin + count) of the layout's flat buffer.
  void operator()(size_t begin, size_t count, float* out) const { fn_(begin, count, out); }

 private:
  std::unique_ptr<nn::ParamLayout> file_layout_;  // the file's model, tp 1, every stage
  std::unique_ptr<ModelRanges> file_;
  std::function<void(size_t, size_t, float*)> fn_;
};

}  // namespace tierzero::train
