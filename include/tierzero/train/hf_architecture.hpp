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

// One HF tensor and the part of our tensor (kind, layer) it fills: rows [row0, row0 + rows) of
// a tensor `cols` wide (a vector: one row). Rows of ours no HF tensor fills (wte's padding) are
// zero.
struct HfTensor {
  std::string name;  // HF's without the architecture's prefix, e.g. "h.3.mlp.c_fc.weight"
  nn::ParamKind kind = nn::ParamKind::wte;
  int layer = -1;                       // ours (-1: not per layer)
  size_t row0 = 0, rows = 0, cols = 0;  // ours
  bool transpose = false;               // HF's is (cols, rows) (GPT-2's Conv1D)
  std::vector<size_t> shape;            // HF's
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

// The architecture a model of this shape is written as.
const HfArchitecture& hf_architecture_of(const nn::GPTConfig& config);

}  // namespace tierzero::train
