// GPT-2 weights as safetensors files with Hugging Face's names (wte.weight, h.0.attn.c_attn.weight,
// ..., ln_f.bias): what `tierzero export` writes from a training checkpoint and `--load
// model.safetensors` reads. HF's Conv1D matrices are stored (in, out), llm.c's and ours (out, in),
// so those four are transposed on the way; wte holds the real vocabulary's rows only (ours is
// padded). Tensors are fp32 ("F32"). Writing streams one tensor at a time (host memory: the
// largest tensor); the header's __metadata__ carries n_head and the padded vocabulary, which the
// shapes do not tell (a file without them: n_head = n_embd / 64, as every GPT-2 size has).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/param_layout.hpp"
#include "tierzero/train/checkpoint.hpp"

namespace tierzero::train {

// One HF tensor and the model tensor it comes from.
struct Gpt2Tensor {
  std::string name;           // e.g. "h.3.mlp.c_fc.weight"
  nn::ParamKind kind;         // ours
  int layer = -1;             // ours (-1: not per layer)
  std::vector<size_t> shape;  // HF's
  size_t rows = 0, cols = 0;  // ours, as the layout holds it (a vector: rows 1)
  bool transpose = false;     // HF's is (cols, rows)
  size_t kept_rows = 0;       // rows of ours written (wte: the real vocabulary)
  size_t numel() const;       // HF's
};

// Every tensor of the model, in llm.c's order (the file's order).
std::vector<Gpt2Tensor> gpt2_tensors(const nn::GPTConfig& config);

// Writes `path` (atomically: a temporary file, fsync, rename). `fill(t, ours)` puts tensor t as
// the model holds it (rows x cols fp32) into `ours`. Throws Error naming the file on failure.
void write_gpt2_safetensors(const std::string& path, const nn::GPTConfig& config,
                            const std::function<void(const Gpt2Tensor& t, float* ours)>& fill);

// A safetensors file's model shape (throws Error naming the file and the tensor that is missing
// or mis-shaped).
nn::GPTConfig read_gpt2_safetensors_config(const std::string& path);
// Loads its weights into a host buffer laid out by `layout` (built from that config, tp 1).
void load_gpt2_safetensors(const std::string& path, const nn::ParamLayout& layout,
                           float* host_params);  // (layout.total_numel())
// Reads any range of `layout` (the file's model, tp 1, every stage) from the file without reading
// the rest (see ModelRanges in checkpoint.hpp): a Gpt2SafetensorsRanges.
std::unique_ptr<ModelRanges> open_gpt2_safetensors_ranges(const std::string& path,
                                                          const nn::ParamLayout& layout);

// ModelRanges over a GPT-2 safetensors file: each layout tensor part of a range is pread from its
// place in the file. A transposed (Conv1D) tensor's part is gathered block by block, a block being
// at most `block_floats` floats of the file (host memory: that block, never the tensor or the
// model); a block spans whole stretches of file rows in one pread when the floats it skips per
// row are at most max(`skip_floats`, the ones it keeps), else it preads each row's needed floats.
// read() is for one thread at a time (the block buffer is shared between calls).
class Gpt2SafetensorsRanges final : public ModelRanges {
 public:
  static constexpr size_t kDefaultBlockFloats = size_t{1} << 20;  // 4 MiB
  static constexpr size_t kDefaultSkipFloats = 1024;  // 4 KiB cost about what a pread does
  // Validates the header as load_gpt2_safetensors does (every tensor present, F32, HF's shape,
  // its data inside the file) and checks the file's model is `layout`'s (a whole one-rank model).
  // Throws Error naming the file (and the tensor). `layout` must outlive the reader.
  Gpt2SafetensorsRanges(const std::string& path, const nn::ParamLayout& layout,
                        size_t block_floats = kDefaultBlockFloats,
                        size_t skip_floats = kDefaultSkipFloats);
  ~Gpt2SafetensorsRanges();
  Gpt2SafetensorsRanges(const Gpt2SafetensorsRanges&) = delete;
  Gpt2SafetensorsRanges& operator=(const Gpt2SafetensorsRanges&) = delete;
  void read(size_t begin, size_t count, float* out) const override;  // (count)
  // The block buffer's allocated floats: at most block_floats whatever was read.
  size_t buffer_floats() const { return block_.capacity(); }

 private:
  // `bytes` of tensor t (layout index) from `offset` bytes into its data; Error on failure.
  void pread_tensor(size_t t, size_t offset, void* dst, size_t bytes) const;
  // Elements [first, first + n) of tensor t (layout index), read from the file (wte's padded rows
  // left as they are: zero).
  void read_part(size_t t, size_t first, size_t n, float* out) const;  // (n)
  // Elements [first, first + n) of a transposed tensor (ours (rows, cols), the file's (cols,
  // rows)).
  void read_transposed(size_t t, size_t first, size_t n, float* out) const;  // (n)

  std::string path_;
  const nn::ParamLayout& layout_;
  size_t block_floats_;
  size_t skip_floats_;
  std::vector<Gpt2Tensor> tensor_;     // (layout tensors) the file's tensor behind each
  std::vector<uint64_t> file_offset_;  // (layout tensors) byte offset in the file of its data
  mutable std::vector<float> block_;   // (<= block_floats) file rows of a transposed tensor
  int fd_ = -1;
};
// Whether `path` is a safetensors file: by its name's extension, or else by its first bytes.
bool is_safetensors_path(const std::string& path);

}  // namespace tierzero::train
