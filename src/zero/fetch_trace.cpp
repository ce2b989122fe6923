// The fetcher's trace and prefetch policy (see fetcher.hpp).
//
// While the trace is recorded (the first training step, or the step after a unit was used out of
// order), every acquire and every gradient reduction first exchanges (kind, unit) with the group,
// so ranks that diverge fail with an Error naming both units instead of hanging in mismatched
// collectives. Later training passes follow the trace: the prefetcher gathers ahead within the
// prefetch bucket and the live budget, and starts NVMe reads further ahead as far as the staging
// buffers allow; a unit whose next use is near stays gathered after release.
#include <algorithm>
#include <limits>
#include <string>

#include "fetcher.hpp"
#include "group_exchange.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"

namespace tierzero::zero {

void Fetcher::begin_pass(PassKind kind) {
  pass_ = kind;
  cursor_ = 0;
  off_trace_ = false;
  if (kind == PassKind::train) {
    counters_ = FetchCounters{};
    recording_ = config_.stage == 3 && !trace_valid_;
    if (recording_) recording_trace_.clear();
  }
  pump_prefetch();
}

void Fetcher::note_use(size_t unit) {
  if (recording_) {
    exchange_trace_word(1.0f, static_cast<float>(unit), "acquires");
    recording_trace_.push_back(unit);
  } else if (!off_trace_ && (cursor_ >= trace_.size() || trace_[cursor_] != unit)) {
    off_trace_ = true;
    ++counters_.out_of_order;
    flush();  // prefetches the trace promised: every rank issues them now
    log::warn("stage 3: unit " + plan_.units()[unit].name + " used out of trace order (call " +
              std::to_string(cursor_ + 1) + " of the step, the trace expects " +
              (cursor_ < trace_.size() ? plan_.units()[trace_[cursor_]].name
                                       : std::string("no more units")) +
              "): fetching on demand for the rest of this step; the trace is recorded again "
              "next step");
  }
  ++cursor_;
}

void Fetcher::check_reduction(size_t unit) {
  if (config_.stage == 3 && pass_ == PassKind::train && recording_)
    exchange_trace_word(2.0f, static_cast<float>(unit), "reduces the gradients of");
}

void Fetcher::end_training_pass() {
  if (config_.stage != 3) return;
  if (pass_ == PassKind::train && recording_) {
    exchange_trace_word(3.0f, static_cast<float>(recording_trace_.size()), "ends the step at");
    trace_ = recording_trace_;
    trace_valid_ = true;
    recording_ = false;
  } else if (pass_ == PassKind::train && off_trace_) {
    trace_valid_ = false;  // record it again next step
  }
  drop_unused();
}

void Fetcher::exchange_trace_word(float kind, float value, const char* what) {
  const auto n = static_cast<size_t>(group_.size());
  if (n == 1) return;
  flush();  // collectives go out in the same order on every rank
  const std::vector<float> all =
      all_gather_pair(group_, storage_.allocator(), kind, value, "zero trace check");  // (ranks, 2)
  auto describe = [&](float k, float v) -> std::string {
    const auto u = static_cast<size_t>(v < 0.0f ? 0.0f : v);
    const std::string name = u < plan_.num_units() ? "unit '" + plan_.units()[u].name + "'"
                                                   : "unit " + std::to_string(u);
    if (k == 1.0f) return "acquires " + name;
    if (k == 2.0f) return "reduces the gradients of " + name;
    if (k == 3.0f) return "ends the step after " + std::to_string(u) + " unit uses";
    return "sends an unknown trace word";
  };
  for (size_t r = 0; r < n; ++r) {
    if (all[2 * r] == kind && all[2 * r + 1] == value) continue;
    TZ_THROW("ZeRO stage 3: ranks use the model's units in different orders (" + group_.describe() +
                 ", call " + std::to_string(recording_trace_.size() + 1) +
                 " of the step being traced): rank " + std::to_string(group_.rank()) + " " +
                 describe(kind, value) + " while rank " + std::to_string(r) + " " +
                 describe(all[2 * r], all[2 * r + 1]) + " (this rank " + what + " it)",
             "every rank must run the same forward and backward over the same units; stage 3 "
             "gathers each unit collectively, so a rank that takes another path would hang");
  }
}

size_t Fetcher::next_use_distance(size_t unit) const {
  size_t distance = 0;
  for (size_t i = cursor_; i < trace_.size(); ++i) {
    if (trace_[i] == unit) return distance;
    distance += plan_.partition(trace_[i]).padded_numel;
  }
  return std::numeric_limits<size_t>::max();
}

bool Fetcher::keep_after_release(size_t unit) const {
  if (pass_ != PassKind::train || recording_ || off_trace_ || !trace_valid_) return false;
  const size_t d = next_use_distance(unit);
  // Keeping a unit must leave room for the prefetch window, or retained units would starve the
  // prefetcher and turn the next fetches into on-demand ones.
  const size_t room = config_.max_live_elems > config_.prefetch_bucket_elems
                          ? config_.max_live_elems - config_.prefetch_bucket_elems
                          : 0;
  return d != std::numeric_limits<size_t>::max() && d <= config_.max_reuse_distance &&
         live_elems_ <= room;
}

void Fetcher::pump_prefetch() {
  if (config_.stage != 3 || pass_ != PassKind::train || recording_ || off_trace_ || !trace_valid_)
    return;
  release_landed_copies();
  issue_deferred();
  std::vector<char> seen(units_.size(), 0);
  size_t window = 0;  // elements gathered (or being gathered) ahead of use
  bool gathering = config_.prefetch_bucket_elems > 0;
  for (size_t i = cursor_; i < trace_.size(); ++i) {
    const size_t u = trace_[i];
    if (seen[u]) continue;
    seen[u] = 1;
    UnitFetch& s = units_[u];
    if (s.refs > 0) continue;
    // Gathered, being gathered or queued (an NVMe read alone does not count: whether it has
    // started depends on this rank's timing, and this decision must not).
    const bool held = s.deferred || s.fetch == Fetch::gathering || s.fetch == Fetch::ready;
    if (persistent(u) && held) continue;  // held until the step
    const size_t padded = plan_.partition(u).padded_numel;
    if (gathering) {
      const bool fits_bucket = window == 0 || window + padded <= config_.prefetch_bucket_elems;
      const bool fits_live =
          held || persistent(u) || live_elems_ + padded <= config_.max_live_elems;
      if (fits_bucket && fits_live) {
        window += padded;
        if (!held) {
          start_gather(u);
          s.prefetched = true;
        }
        continue;
      }
      gathering = false;
    }
    // Beyond the gather window: start NVMe reads early, as far as the staging buffers allow.
    if (storage_.placement(u).param != Tier::nvme || s.fetch != Fetch::none || s.deferred) continue;
    if (!read_startable(u)) break;  // the staging budget is full, or the update is not on disk
    start_read(u);
    s.prefetched = true;
  }
}

}  // namespace tierzero::zero
