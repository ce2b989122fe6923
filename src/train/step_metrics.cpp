// The --metrics line of one step (step_metrics.hpp). nlohmann::json serializes NaN and infinity
// as null, which is what keeps the line parseable.
#include "tierzero/train/step_metrics.hpp"

namespace tierzero::train {

nlohmann::ordered_json step_metrics_json(const StepRecord& r, const nn::TensorParallelTraffic& tp,
                                         size_t ulysses_all_to_all_bytes, size_t ulysses_calls) {
  nlohmann::ordered_json line;
  line["step"] = r.step;
  line["loss"] = r.loss;
  line["lr"] = r.lr;
  line["grad_norm"] = r.grad_norm;
  line["ms"] = r.seconds * 1e3;
  line["tokens_per_s"] = r.tokens_per_second;
  line["prefetch_hits"] = r.prefetch_hits;
  line["on_demand_fetches"] = r.on_demand_fetches;
  line["stall_ms"] = r.stall_s * 1e3;
  line["nvme_reads"] = r.nvme_reads;
  line["handoffs"] = r.handoffs;
  line["tp_all_reduce_bytes"] = tp.all_reduce_bytes;
  line["tp_all_gather_bytes"] = tp.all_gather_bytes;
  line["tp_reduce_scatter_bytes"] = tp.reduce_scatter_bytes;
  line["ulysses_all_to_all_bytes"] = ulysses_all_to_all_bytes;
  line["ulysses_calls"] = ulysses_calls;
  line["cpu_ms"] = r.cpu_seconds * 1e3;
  line["reductions"] = r.reductions;
  line["reduce_ms"] = r.reduction_s * 1e3;
  line["reduce_exposed_ms"] = r.reduction_exposed_s * 1e3;
  line["opt_worker_ms"] = r.optimizer_worker_s * 1e3;
  line["opt_overlapped_ms"] = r.optimizer_overlapped_s * 1e3;
  line["opt_exposed_ms"] = r.optimizer_exposed_s * 1e3;
  line["opt_overlapped_units"] = r.optimizer_overlapped_units;
  line["opt_redone_units"] = r.optimizer_redone_units;
  line["opt_unbacked_units"] = r.optimizer_unbacked_units;
  line["host_waits"] = r.host_waits;
  return line;
}

}  // namespace tierzero::train
