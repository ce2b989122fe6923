// llm.c model checkpoints (magic 20240326, version 3 = fp32): a 256 x int32 header
// (magic, version, maxT, V, L, NH, C, Vp) and then every parameter in llm.c's order, each
// per-layer kind stacked over layers. Existing GPT-2 checkpoints in this format train or evaluate.
#pragma once

#include <string>

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

}  // namespace tierzero::train
