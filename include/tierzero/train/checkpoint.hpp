// llm.c model checkpoints (magic 20240326, version 3 = fp32): a 256 x int32 header
// (magic, version, maxT, V, L, NH, C, Vp) and then every parameter in llm.c's order, each
// per-layer kind stacked over layers. Existing GPT-2 checkpoints in this format train or evaluate.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/param_layout.hpp"

namespace tierzero::train {

constexpr int32_t kCheckpointMagic = 20240326;
constexpr int32_t kCheckpointVersionF32 = 3;

// Reads and validates the header (and the file size); Error names the file and the problem.
nn::GPTConfig read_checkpoint_config(const std::string& path);
// Loads parameters into a host buffer laid out by `layout` (built from the checkpoint's config).
void load_checkpoint(const std::string& path, const nn::ParamLayout& layout,
                     float* host_params);  // (layout.total_numel())
// Writes atomically (temporary file + fsync + rename), so an interrupted save loses nothing.
void save_checkpoint(const std::string& path, const nn::GPTConfig& config,
                     const nn::ParamLayout& layout, const float* host_params);

// Any range of a whole one-rank model's flat buffer (tp 1, every stage) read from a model file
// without reading the rest: a rank loads only what it keeps.
class ModelRanges {
 public:
  virtual ~ModelRanges() = default;
  // Elements [begin, begin + count) of the layout's flat buffer (padding zero).
  virtual void read(size_t begin, size_t count, float* out) const = 0;  // (count)

  // One contiguous run of elements: [full, full + n) of the layout's flat buffer into out[at...].
  struct Run {
    size_t full = 0, at = 0, n = 0;
  };
  // Many runs in increasing `full` order (a tensor-parallel rank's pieces of one tensor: a part
  // of every row) in one pass over their span, in blocks of at most block_elems through
  // `scratch`, instead of one read per run (one per row, or per element of a transposed file).
  void read_runs(const std::vector<Run>& runs, float* out, std::vector<float>& scratch,
                 size_t block_elems = size_t{1} << 22) const;
};

// Opens `path` by its kind (a Hugging Face model directory, an llm.c file, or safetensors by its
// name's extension) for reading `layout` (the one-rank layout of the file's own model) by range.
// Error names the file.
std::unique_ptr<ModelRanges> open_model_ranges(const std::string& path,
                                               const nn::ParamLayout& layout);

// ModelRanges over an llm.c file (its tensors stored elsewhere in the file, in llm.c's order).
class ModelFileRanges final : public ModelRanges {
 public:
  // Validates the file as read_checkpoint_config does and checks it matches `layout` (a whole
  // one-rank model: tp 1, every stage).
  ModelFileRanges(const std::string& path, const nn::ParamLayout& layout);
  ~ModelFileRanges();
  ModelFileRanges(const ModelFileRanges&) = delete;
  ModelFileRanges& operator=(const ModelFileRanges&) = delete;
  void read(size_t begin, size_t count, float* out) const override;  // (count)

 private:
  std::string path_;
  const nn::ParamLayout& layout_;
  std::vector<size_t> file_offset_;  // (tensors) byte offset in the file of each layout tensor
  int fd_ = -1;
};

// Writes an llm.c file tensor by tensor as their values arrive (in any order) and then makes it
// visible atomically (temporary file, fsync, rename): no rank holds the whole model to save it.
class ModelFileWriter {
 public:
  ModelFileWriter(const std::string& path, const nn::GPTConfig& config,
                  const nn::ParamLayout& layout);
  ~ModelFileWriter();  // removes the temporary file unless commit() ran
  ModelFileWriter(const ModelFileWriter&) = delete;
  ModelFileWriter& operator=(const ModelFileWriter&) = delete;
  // The values of elements [begin, begin + count) of the layout's flat buffer (only the parts
  // that are tensors are written).
  void write(size_t begin, size_t count, const float* values);
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  const nn::ParamLayout& layout_;
  std::vector<size_t> file_offset_;  // (tensors) byte offset in the file of each layout tensor
  int fd_ = -1;
};

}  // namespace tierzero::train
