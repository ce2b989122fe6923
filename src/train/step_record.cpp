// StepRecord's conversions (step_record.hpp): from the store's counters, to the profile's.
#include "tierzero/train/step_record.hpp"

namespace tierzero::train {

void record_fetch_counters(StepRecord& r, const zero::FetchCounters& fc, bool stage3) {
  if (stage3) {
    r.fetch_counted = true;
    r.prefetch_hits = fc.prefetch_hits;
    r.on_demand_fetches = fc.on_demand_fetches;
    r.stall_s = fc.stall_s;
    r.nvme_reads = fc.nvme_reads;
    r.handoffs = fc.handoffs;
  }
  r.reductions = fc.reductions;
  r.reduction_s = fc.reduction_s;
  r.reduction_exposed_s = fc.reduction_exposed_s;
  r.optimizer_worker_s = fc.optimizer_worker_s;
  r.optimizer_overlapped_s = fc.optimizer_overlapped_s;
  r.optimizer_exposed_s = fc.optimizer_exposed_s;
  r.optimizer_overlapped_units = fc.optimizer_overlapped_units;
  r.optimizer_redone_units = fc.optimizer_redone_units;
  r.optimizer_unbacked_units = fc.optimizer_unbacked_units;
}

profile::StepCounters profile_step_counters(const StepRecord& r, size_t tokens) {
  profile::StepCounters counters;
  counters.prefetch_hits = r.prefetch_hits;
  counters.on_demand_fetches = r.on_demand_fetches;
  counters.stall_s = r.stall_s;
  counters.step_s = r.seconds;
  counters.loss = r.loss;
  counters.tokens = tokens;
  counters.reductions = r.reductions;
  counters.reduction_s = r.reduction_s;
  counters.reduction_exposed_s = r.reduction_exposed_s;
  return counters;
}

}  // namespace tierzero::train
