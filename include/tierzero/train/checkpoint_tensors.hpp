// A training checkpoint's model read back as whole tensors, range by range: what `tierzero
// export` writes (a GPT-2 safetensors file, a Hugging Face directory). Each tensor is assembled
// from the fp32 master values of every rank that holds part of it: the data-parallel shards by
// range (CheckpointRanges), and, for a tensor-parallel checkpoint, every tp rank's piece placed
// where the modules' TensorMeta says it sits in the whole tensor (the same mapping
// scatter_full_params and assemble_full_params use), replicated tensors from tp rank 0. Nothing
// holds the whole model.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/checkpoint_contents.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace tierzero::train {

class CheckpointTensors {
 public:
  // `checkpoint` was opened whole (open_checkpoint) and `model` is checkpoint_model(checkpoint),
  // which checked that every tp rank's tensors lie where its layout puts them.
  CheckpointTensors(const CheckpointContents& checkpoint, const nn::GPTConfig& model);
  CheckpointTensors(const CheckpointTensors&) = delete;
  CheckpointTensors& operator=(const CheckpointTensors&) = delete;

  // Elements [first, first + count) of the whole tensor (kind, layer), row-major as the one-rank
  // model holds it, into out (count fp32). Host memory besides `out`: one checkpoint block per tp
  // rank, and a staging buffer for a tp rank's part of the range when it is not one run of it (a
  // row-parallel matrix's columns: its 1/tp share of every row). Error naming the checkpoint when
  // it holds no fp32 values of the tensor or a block fails its CRC.
  void read(nn::ParamKind kind, int layer, size_t first, size_t count, float* out);

  size_t tp() const { return pieces_.size(); }
  // The staging buffer's floats so far (at most the largest range read).
  size_t staging_floats() const { return staging_.capacity(); }

 private:
  // Local elements [begin, begin + count) of tp rank r's piece of `local` into dst.
  void read_piece(size_t r, const nn::ParamTensor& local, size_t begin, size_t count, float* dst);

  std::string dir_;
  nn::ParamLayout whole_;                // tp 1: the tensors' full shapes
  std::vector<nn::ParamLayout> pieces_;  // (tp) each tp rank's layout
  std::vector<UnitGrouping> units_;      // (tp) its store units, as its rank files name them
  CheckpointRanges ranges_;
  std::vector<float> staging_;  // (<= a range's elements) one tp rank's part of the range
};

}  // namespace tierzero::train
