// Cutting the GPT's blocks into pipeline stages: as listed, or balanced by parameters (a small
// dynamic program over contiguous runs).
#include "tierzero/nn/pipeline_stage.hpp"

#include <algorithm>
#include <limits>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/param_layout.hpp"

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

namespace {

std::vector<PipelineStage> stages_from_counts(const std::vector<size_t>& counts) {
  std::vector<PipelineStage> out;
  size_t at = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    out.push_back(PipelineStage{counts.size(), s, at, counts[s]});
    at += counts[s];
  }
  return out;
}

// Blocks per stage minimising the largest stage's parameters, each stage >= 1 block.
std::vector<size_t> balanced_counts(const GPTConfig& config, size_t stages) {
  const ParamLayout layout(config);
  const size_t L = config.num_layers;
  const size_t block = layout.units()[layout.unit_index("block.0")].numel;
  const size_t embeddings = layout.units()[layout.unit_index("embeddings")].numel;
  const size_t final_norm = layout.units()[layout.unit_index("final_norm")].numel;
  auto extra = [&](size_t s) {
    size_t e = 0;
    if (s == 0) e += embeddings;
    if (s + 1 == stages) e += embeddings + final_norm;  // the tied copy
    return e;
  };
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  // best[s][b]: the least largest-stage load of stages 0..s-1 holding the first b blocks.
  std::vector<std::vector<size_t>> best(stages + 1, std::vector<size_t>(L + 1, kNone));
  std::vector<std::vector<size_t>> take(stages + 1, std::vector<size_t>(L + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= stages; ++s)
    for (size_t b = s; b <= L; ++b)
      for (size_t k = 1; k <= b - (s - 1); ++k) {  // stage s-1 takes k blocks
        if (best[s - 1][b - k] == kNone) continue;
        const size_t load = std::max(best[s - 1][b - k], k * block + extra(s - 1));
        if (load < best[s][b]) {
          best[s][b] = load;
          take[s][b] = k;
        }
      }
  std::vector<size_t> counts(stages);
  for (size_t s = stages, b = L; s > 0; --s) {
    counts[s - 1] = take[s][b];
    b -= take[s][b];
  }
  return counts;
}

}  // namespace

std::vector<PipelineStage> partition_pipeline(const GPTConfig& config, size_t stages,
                                              const std::vector<size_t>& blocks_per_stage) {
  const size_t L = config.num_layers;
  TZ_CHECK(stages >= 1, "pipeline_parallel 0", "pipeline_parallel is at least 1");
  TZ_CHECK(stages <= L,
           "pipeline_parallel " + std::to_string(stages) + " exceeds the model's " +
               std::to_string(L) + " transformer blocks",
           "every pipeline stage holds at least one block: use at most n_layer stages");
  if (blocks_per_stage.empty()) return stages_from_counts(balanced_counts(config, stages));
  TZ_CHECK(blocks_per_stage.size() == stages,
           "pipeline_stages lists " + std::to_string(blocks_per_stage.size()) +
               " stages but pipeline_parallel is " + std::to_string(stages),
           "give one block count per stage, or leave pipeline_stages out to balance them");
  size_t sum = 0;
  for (size_t s = 0; s < stages; ++s) {
    TZ_CHECK(blocks_per_stage[s] >= 1,
             "pipeline_stages gives stage " + std::to_string(s) + " no blocks",
             "every pipeline stage holds at least one block");
    sum += blocks_per_stage[s];
  }
  TZ_CHECK(sum == L,
           "pipeline_stages' block counts sum to " + std::to_string(sum) + ", but the model has " +
               std::to_string(L) + " blocks",
           "make the counts add up to n_layer");
  return stages_from_counts(blocks_per_stage);
}

}  // namespace tierzero::nn
