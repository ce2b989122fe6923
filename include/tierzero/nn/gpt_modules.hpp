// The GPT-2 as its ordered top-level modules — embeddings, blocks 0..L-1, final norm, tied head —
// and the parameter units they declare. The layout is built from these declarations, so the
// modules are the one place that says which tensors exist and how they split.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/module.hpp"
#include "tierzero/nn/param_layout.hpp"

namespace tierzero::nn {

using ModuleList = std::vector<std::unique_ptr<Module>>;

// In forward order; module i has index() i. Unbound: bind each to a layout before running.
ModuleList make_gpt_modules(const GPTConfig& config);
// One unit per module that owns parameters, in module order ("embeddings", "block.<i>",
// "final_norm"), with the module's block and tied when another module uses the unit too;
// modules sharing another's unit (the head) add none.
std::vector<UnitDecl> param_units(const ModuleList& modules);
std::vector<UnitDecl> gpt_param_units(const GPTConfig& config);
// The GPT-2 of `config` on tensor-parallel rank tp (default: one rank, every tensor whole). Here,
// above the modules, not a ParamLayout constructor: the layout knows units, not the GPT.
ParamLayout gpt_param_layout(const GPTConfig& config, const TensorParallel& tp = {});
// gpt_param_layout(config).parameter_count() without the whole model's layout: the blocks are
// alike, so a one-block model's count and the block's (a layout of 10^5 blocks takes seconds and
// hundreds of MB).
size_t gpt_parameter_count(const GPTConfig& config);

}  // namespace tierzero::nn
