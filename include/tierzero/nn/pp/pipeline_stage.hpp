// PipelineStage: which part of the GPT one pipeline-parallel rank runs — a contiguous run of
// transformer blocks, plus the embedding on the first stage and the final norm and tied head on
// the last (which also holds a copy of the embeddings' unit, tied to the first stage's: its
// gradients are summed over the two before each step). partition_pipeline (pipeline_cut.hpp)
// cuts the blocks into stages.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::nn {

struct PipelineStage {
  size_t stages = 1;
  size_t stage = 0;
  size_t first_block = 0;  // the stage's first transformer block (global index)
  size_t num_blocks = 0;   // its blocks; the whole model's when stages == 1 (see whole())
  bool first() const { return stage == 0; }
  bool last() const { return stage + 1 == stages; }
  bool holds_block(size_t layer) const {
    return layer >= first_block && layer < first_block + num_blocks;
  }
  std::string str() const;  // "stage 1 of 4: blocks 3-5"
  // The one stage of an unpipelined model of `config`.
  static PipelineStage whole(const GPTConfig& config);
};

// The chunks pipeline rank `rank` of `pp` runs when the blocks are cut into pp x v virtual stages
// (partition_pipeline's, in order): virtual stages rank, rank + pp, rank + 2 pp, ... (Megatron's
// interleaved layout; the one stage `rank` when the cut has pp stages).
std::vector<PipelineStage> rank_chunks(const std::vector<PipelineStage>& virtual_stages, size_t pp,
                                       size_t rank);

}  // namespace tierzero::nn
