// One line of `train --metrics` (JSON Lines, one object per step), built with nlohmann::json so
// that it is valid JSON whatever the values: a non-finite loss or gradient norm (a diverged or
// overflowed step) is written as null, never as "nan" or "-nan". Keys: step, loss, lr,
// grad_norm, ms, tokens_per_s, prefetch_hits, on_demand_fetches, stall_ms, nvme_reads, handoffs,
// tp_*_bytes, ulysses_*; under pipeline parallelism the trainer adds the pp_* keys.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

#include "tierzero/nn/tp/tensor_parallel_group.hpp"
#include "tierzero/train/step_record.hpp"

namespace tierzero::train {

nlohmann::ordered_json step_metrics_json(const StepRecord& r, const nn::TensorParallelTraffic& tp,
                                         size_t ulysses_all_to_all_bytes, size_t ulysses_calls);

}  // namespace tierzero::train
