// A pipeline stage described for messages, the whole-model stage, and a rank's chunks.
#include "tierzero/nn/pp/pipeline_stage.hpp"

#include <string>
#include <vector>

namespace tierzero::nn {

std::string PipelineStage::str() const {
  std::string s = "stage " + std::to_string(stage) + " of " + std::to_string(stages) + ": blocks " +
                  std::to_string(first_block) + "-" + std::to_string(first_block + num_blocks - 1);
  if (first()) s += " + embeddings";
  if (last()) s += " + final norm and head";
  return s;
}

std::vector<PipelineStage> rank_chunks(const std::vector<PipelineStage>& virtual_stages, size_t pp,
                                       size_t rank) {
  std::vector<PipelineStage> chunks;
  for (size_t k = rank; k < virtual_stages.size(); k += pp) chunks.push_back(virtual_stages[k]);
  return chunks;
}

PipelineStage PipelineStage::whole(const GPTConfig& config) {
  return PipelineStage{1, 0, 0, config.num_layers};
}

}  // namespace tierzero::nn
