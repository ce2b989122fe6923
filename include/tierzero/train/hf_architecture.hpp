// The Hugging Face architectures a model directory may hold, each one table: its config.json
// keys to our GPTConfig and back, and every HF tensor name to the place in our layout it fills
// (a tensor, a row range inside it when our layout fuses several HF tensors, whether HF stores it
// transposed). The directory reader and writer (hf_directory.hpp) know no architecture: adding
// one is adding a table here.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/tensor_meta.hpp"

namespace tierzero::train {

// Consecutive rows of an HF tensor (in our orientation) and where they go in our tensor.
struct HfRowSpan {
  size_t hf_row = 0;  // first row in the HF tensor
  size_t row = 0;     // first row in ours
  size_t rows = 0;
};

// One HF tensor and the parts of our tensor (kind, layer) it fills: `rows` rows of `cols`
// elements in our orientation (a vector: one row), placed by row spans — one span for a tensor
// that is ours whole, several where our layout fuses HF tensors (Llama's q, k and v heads into
// one grouped qkv). Rows of ours no HF tensor fills (wte's padding) are zero.
struct HfTensor {
  std::string name;  // HF's without the architecture's prefix, e.g. "h.3.mlp.c_fc.weight"
  nn::ParamKind kind = nn::ParamKind::wte;
  int layer = -1;                // ours (-1: not per layer)
  size_t rows = 0, cols = 0;     // in our orientation
  bool transpose = false;        // HF's is (cols, rows) (GPT-2's Conv1D)
  std::vector<size_t> shape;     // HF's
  std::vector<HfRowSpan> spans;  // covering its rows once
  size_t numel() const { return rows * cols; }
};

struct HfArchitecture {
  std::string name;        // config.json "architectures"[0], e.g. "GPT2LMHeadModel"
  std::string model_type;  // config.json "model_type", e.g. "gpt2"
  // Prefixes a tensor's name may carry in a file ("transformer." as save_pretrained writes GPT-2,
  // "" as the hub's gpt2 has it); the first is the one written.
  std::vector<std::string> prefixes;
  // Our model shape from config.json (`source` names the file in errors): Error naming the key
  // that is missing or holds a value this build cannot run.
  nn::GPTConfig (*config_from_json)(const nlohmann::json& config, const std::string& source);
  // config.json for our model (torch_dtype is added by the writer).
  nlohmann::ordered_json (*config_to_json)(const nn::GPTConfig& config);
  // Every HF tensor of the model, in the order written.
  std::vector<HfTensor> (*tensors)(const nn::GPTConfig& config);
  // Tensors a file may hold that carry nothing of ours (a tied head, GPT-2's causal-mask
  // buffers), by name without prefix.
  bool (*ignorable)(const std::string& name);
};

// The architecture config.json names, or Error (naming `source`) saying which are supported.
const HfArchitecture& hf_architecture(const std::string& name, const std::string& source);

// The architecture of a config.json "model_type" ("gpt2", "llama", ...), or null: what a
// config.json without "architectures" (as some tools write) is read as.
const HfArchitecture* hf_architecture_by_model_type(const std::string& model_type);

// The architecture a model of this shape is written as.
const HfArchitecture& hf_architecture_of(const nn::GPTConfig& config);

}  // namespace tierzero::train
