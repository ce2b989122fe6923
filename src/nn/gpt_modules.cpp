// The GPT-2's module list, the parameter units it declares and the layout built from them.
#include "tierzero/nn/gpt_modules.hpp"

#include <string>
#include <unordered_map>

#include "block.hpp"
#include "embedding.hpp"
#include "final_norm.hpp"
#include "head.hpp"

namespace tierzero::nn {

ModuleList make_gpt_modules(const GPTConfig& config) {
  config.validate();
  ModuleList m;
  m.push_back(std::make_unique<Embedding>(config, m.size()));
  for (size_t l = 0; l < config.num_layers; ++l)
    m.push_back(std::make_unique<Block>(config, static_cast<int>(l), m.size()));
  m.push_back(std::make_unique<FinalNorm>(config, m.size()));
  m.push_back(std::make_unique<Head>(config, m.size()));
  return m;
}

std::vector<UnitDecl> param_units(const ModuleList& modules) {
  std::unordered_map<std::string, size_t> users;  // a map: linear in the model's blocks
  for (const auto& m : modules) ++users[m->unit_name()];
  std::vector<UnitDecl> units;
  for (const auto& m : modules) {
    std::vector<TensorMeta> tensors = m->parameters();
    if (!tensors.empty())
      units.push_back(
          UnitDecl{m->unit_name(), std::move(tensors), m->block(), users.at(m->unit_name()) > 1});
  }
  return units;
}

std::vector<UnitDecl> gpt_param_units(const GPTConfig& config) {
  return param_units(make_gpt_modules(config));
}

ParamLayout gpt_param_layout(const GPTConfig& config, const TensorParallel& tp) {
  return ParamLayout(gpt_param_units(config), tp);
}

size_t gpt_parameter_count(const GPTConfig& config) {
  if (config.num_layers <= 1) return gpt_param_layout(config).parameter_count();
  GPTConfig one_block = config;
  one_block.num_layers = 1;
  const ParamLayout layout = gpt_param_layout(one_block);
  size_t block = 0;
  for (const ParamUnit& u : layout.units())
    if (u.block == 0)
      for (size_t t : u.tensors) block += layout.tensors()[t].numel;
  return layout.parameter_count() + (config.num_layers - 1) * block;
}

}  // namespace tierzero::nn
