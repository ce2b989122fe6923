// The global batch as DeepSpeed defines it: train_batch_size = train_micro_batch_size_per_gpu x
// gradient_accumulation_steps x data-parallel ranks. A config may give any two of the three, or
// train_batch_size alone; the rest is derived once the data-parallel size is known (the config
// alone does not know the ranks), and three that disagree are refused rather than one of them
// ignored.
#pragma once

#include <cstdint>

#include "tierzero/train/train_config.hpp"

namespace tierzero::train {

// Sets c's micro-batch size and accumulation from c.train_batch_size (when non-zero) and
// `dp_size`, as DeepSpeed does: with train_batch_size and the micro-batch the accumulation is
// derived, with it and the accumulation the micro-batch, with it alone the accumulation is 1.
// Error naming the three and the ranks when they do not divide or disagree.
void resolve_global_batch(TrainConfig& c, int64_t dp_size);

}  // namespace tierzero::train
