// Progress output of a training run: one line per step with a bar, and the end-of-run memory
// summary per tier and category from the MemoryTracker.
#pragma once

#include <cstdint>
#include <cstdio>

#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/train/step_record.hpp"

namespace tierzero::train {

void print_step_line(std::FILE* out, const StepRecord& r, int64_t total_steps,
                     const MemoryTracker& tracker);
void print_memory_summary(std::FILE* out, const MemoryTracker& tracker);

}  // namespace tierzero::train
