// Hugging Face model directories: config.json with model.safetensors, or a sharded set listed in
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {tensor: shard}}),
// in BF16, F16 or F32. `--load DIR` reads one by range (each rank only its ranges, converting to
// fp32 as it reads, host memory bounded by a block buffer) and `tierzero export CKPT -o DIR
// --hf-dir` writes one tensor at a time. What the directory's architecture means (config keys,
// tensor names, fused row ranges, transposes) is hf_architecture's table; every shard is checked
// as the single-file reader checks its file (safetensors_header).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/hf_architecture.hpp"

namespace tierzero::train {

// Whether `path` names a directory (what --load takes as a Hugging Face model directory).
bool is_hf_directory(const std::string& path);

// The model shape a Hugging Face config.json describes (its "architectures", or its model_type),
// without any weights: what `estimate --hf-config` and `plan --hf-config` size. Error naming the
// file and the key at fault.
nn::GPTConfig read_hf_config_file(const std::string& config_path);

// The model shape of the directory's config.json, after every tensor of it has been found in its
// shard with HF's shape and a supported dtype. Error naming the file and the key or tensor at
// fault.
nn::GPTConfig read_hf_directory_config(const std::string& dir);

// Reads any range of `layout` (the directory's model, tp 1, every stage) without reading the
// rest: each layout tensor part is read from the HF tensors that fill it (a row range each),
// converted to fp32; transposed tensors are gathered in blocks as Gpt2SafetensorsRanges does.
// Host memory: a block buffer of at most block_floats x 4 bytes. read() is for one thread at a
// time.
class HfDirectoryRanges final : public ModelRanges {
 public:
  static constexpr size_t kDefaultBlockFloats = size_t{1} << 20;  // 4 MiB
  // Validates the directory as read_hf_directory_config does and checks its model is `layout`'s.
  // `layout` must outlive the reader.
  HfDirectoryRanges(const std::string& dir, const nn::ParamLayout& layout,
                    size_t block_floats = kDefaultBlockFloats);
  ~HfDirectoryRanges();
  HfDirectoryRanges(const HfDirectoryRanges&) = delete;
  HfDirectoryRanges& operator=(const HfDirectoryRanges&) = delete;
  void read(size_t begin, size_t count, float* out) const override;  // (count)
  // The block buffer's allocated bytes: at most 4 x block_floats whatever was read.
  size_t buffer_bytes() const { return block_.capacity(); }
  size_t shards() const { return shard_path_.size(); }

  // One HF tensor as found: its shard, where its data starts and its element type.
  struct Found {
    HfTensor tensor;
    size_t shard = 0;     // index into shard_path_
    uint64_t offset = 0;  // bytes from the shard's start
    DType dtype = DType::f32;
  };

 private:
  // One row span of a found tensor: what fills part of a layout tensor.
  struct Piece {
    const Found* found;
    HfRowSpan span;
  };
  // Elements [first, first + n) of piece p's HF tensor (its rows x cols, ours), converted.
  void read_piece(const Piece& p, size_t first, size_t n, float* out) const;       // (n)
  void read_transposed(const Piece& p, size_t first, size_t n, float* out) const;  // (n)
  // `count` elements of piece p's file data from element `at` into dst (raw bytes).
  void pread_piece(const Piece& p, size_t at, size_t count, void* dst) const;

  std::string dir_;
  const nn::ParamLayout& layout_;
  size_t block_floats_;
  std::vector<std::string> shard_path_;
  std::vector<int> fd_;                     // (shards)
  std::vector<Found> found_;                // the architecture's HF tensors
  std::vector<std::vector<Piece>> pieces_;  // (layout tensors) the spans filling each
  mutable std::vector<uint8_t> block_;      // (<= 4 x block_floats bytes) raw file elements
};

std::unique_ptr<ModelRanges> open_hf_directory_ranges(const std::string& dir,
                                                      const nn::ParamLayout& layout);

struct HfExportOptions {
  DType dtype = DType::bf16;                 // of every tensor written
  uint64_t max_shard_bytes = 5'000'000'000;  // as transformers' default "5GB"
};

struct HfExportSummary {
  size_t tensors = 0, shards = 0;
  uint64_t bytes = 0;  // of tensor data
};

// Writes the directory `dir` (it must not exist or be empty): shards of at most max_shard_bytes
// (a larger tensor alone in its own), model.safetensors.index.json when there are several (one
// shard is model.safetensors, as transformers writes it), config.json. Everything is written in a
// sibling temporary directory and renamed into place, so `dir` appears only whole. `fill(t, row,
// rows, ours)` puts rows [row, row + rows) of our tensor (t.kind, t.layer) (rows x t.cols fp32)
// into `ours`; host memory holds one HF tensor. Error naming the file on failure.
using HfFill = std::function<void(const HfTensor& t, size_t row, size_t rows, float* ours)>;
HfExportSummary write_hf_directory(const std::string& dir, const nn::GPTConfig& config,
                                   const HfExportOptions& options, const HfFill& fill);

}  // namespace tierzero::train
