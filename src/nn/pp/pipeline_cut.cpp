// Cutting the GPT's blocks into pipeline stages: as listed, or balanced by parameters (the cut a
// dynamic program over contiguous runs picks, found by a binary search per stage).
#include "tierzero/nn/pp/pipeline_cut.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"

namespace tierzero::nn {

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

// The cut balanced by parameters, as a dynamic program over contiguous runs would pick it: the
// least largest stage load, and among the cuts that reach it the last stage takes the fewest
// blocks, then the one before it, and so on. Blocks are all alike, so the least largest load of
// stages 0..s-1 holding b blocks is the least M at which their capacities floor((M - extra) /
// block) hold b: a binary search per stage, not a stages x blocks x blocks table (which took
// minutes at 100k blocks).
class BalancedCut {
 public:
  BalancedCut(const GPTConfig& config, size_t stages) : stages_(stages) {
    // The unit sizes do not depend on the number of blocks: a one-block model's layout has them
    // (the whole model's, at 100k blocks, took seconds).
    GPTConfig one_block = config;
    one_block.num_layers = 1;
    const ParamLayout layout = gpt_param_layout(one_block);
    bool before_blocks = true;
    for (const ParamUnit& u : layout.units()) {
      if (u.block >= 0) {
        block_ += u.numel;
        before_blocks = false;
        continue;
      }
      (before_blocks ? first_extra_ : last_extra_) += u.numel;
      if (before_blocks && u.tied) last_extra_ += u.numel;  // the last stage's tied copy
    }
    TZ_CHECK(block_ > 0, "a transformer block without parameters", "internal error");
  }

  std::vector<size_t> counts(size_t blocks) const {
    std::vector<size_t> counts(stages_);
    for (size_t s = stages_, b = blocks; s > 0; --s) {
      const size_t load = least_load(s, b);
      const size_t prefix = s == 1 ? 0 : std::min(b - 1, capacity(s - 1, load));
      counts[s - 1] = b - prefix;
      b = prefix;
    }
    return counts;
  }

 private:
  size_t extra(size_t s) const {
    size_t e = 0;
    if (s == 0) e += first_extra_;
    if (s + 1 == stages_) e += last_extra_;
    return e;
  }
  // Blocks stages 0..s-1 hold at most under the load `load`; 0 when one of them cannot hold one.
  // Only the first and the last stage carry extra parameters.
  size_t capacity(size_t s, size_t load) const {
    const size_t last = stages_ - 1;
    size_t total = 0, plain = s;
    for (size_t i : {size_t{0}, last}) {
      if (i >= s || (i == last && last == 0)) continue;  // outside the prefix, or stage 0 again
      --plain;
      if (load < extra(i) + block_) return 0;
      total += (load - extra(i)) / block_;
    }
    if (plain == 0) return total;
    if (load < block_) return 0;
    return total + plain * (load / block_);
  }
  size_t least_load(size_t s, size_t b) const {
    size_t lo = 0, hi = (b - s + 1) * block_ + extra(0) + extra(stages_ - 1);
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (capacity(s, mid) >= b)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }

  size_t stages_;
  size_t block_ = 0;
  size_t first_extra_ = 0;  // the units before the blocks (the embeddings)
  size_t last_extra_ = 0;   // those after them (the final norm) and copies of tied ones before
};

}  // namespace

std::vector<PipelineStage> partition_pipeline(const GPTConfig& config, size_t stages,
                                              const std::vector<size_t>& blocks_per_stage) {
  const size_t L = config.num_layers;
  TZ_CHECK(stages >= 1, "pipeline_parallel 0", "pipeline_parallel is at least 1");
  TZ_CHECK(stages <= L,
           "pipeline_parallel " + std::to_string(stages) + " exceeds the model's " +
               std::to_string(L) + " transformer blocks",
           "every pipeline stage holds at least one block: use at most n_layer stages");
  if (blocks_per_stage.empty()) return stages_from_counts(BalancedCut(config, stages).counts(L));
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
