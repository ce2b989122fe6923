// partition_pipeline: cuts the GPT's blocks into pipeline stages, balanced by the parameters each
// stage holds or as the user lists them. Apart from PipelineStage because it sizes the stages from
// the GPT's parameter units, while PipelineStage is plain data that the micro-batches use.
#pragma once

#include <cstddef>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/nn/pp/pipeline_stage.hpp"

namespace tierzero::nn {

// Every stage of a `stages`-way pipeline of config's L blocks. blocks_per_stage: the blocks of
// each stage (stages entries, each >= 1, summing to L); empty: balanced so that the largest
// stage's parameters are as few as they can be (the embeddings count on the first and, as the
// tied copy, on the last stage; the final norm on the last). Throws Error naming the problem when
// stages is 0 or above L, or the list does not fit.
std::vector<PipelineStage> partition_pipeline(const GPTConfig& config, size_t stages,
                                              const std::vector<size_t>& blocks_per_stage = {});

}  // namespace tierzero::nn
