// Whole-profile figures: peaks, steady-step means, unaccounted bytes.
#include "tierzero/profile/profile_summary.hpp"

#include <algorithm>

namespace tierzero::profile {

bool device_is_host_memory(const RunInfo& run) {
  return run.device.empty() || run.device.rfind("cpu", 0) == 0;
}

ProfileSummary summarize(const Profile& p) {
  ProfileSummary s;
  s.steps = p.steps.size();
  s.host_available = p.run.host_available;
  bool seen_available = false;
  const size_t first_steady = p.steps.size() > 1 ? 1 : 0;
  s.steady_steps = p.steps.size() - first_steady;
  double stall_counter = 0.0, stall_track = 0.0;
  std::array<double, kNumTracks> counts{};
  double forward_backward_s = 0.0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile& st = p.steps[i];
    for (size_t t = 0; t < kNumTiers; ++t) {
      for (size_t c = 0; c < kNumCategories; ++c)
        if (s.peak[t][c].step < 0 || st.peak[t][c].bytes > s.peak[t][c].at.bytes)
          s.peak[t][c] = {st.peak[t][c], st.step};
      if (s.tier_peak[t].step < 0 || st.tier_peak[t].bytes > s.tier_peak[t].at.bytes)
        s.tier_peak[t] = {st.tier_peak[t], st.step};
    }
    const size_t tracked_device = tier_total(st.at_end, Tier::device);
    if (st.driver_device_used >= 0) {
      const int64_t gap = st.driver_device_used - static_cast<int64_t>(tracked_device);
      if (gap > s.unaccounted_device) {
        s.unaccounted_device = gap;
        s.driver_device_used = static_cast<size_t>(st.driver_device_used);
        s.tracked_device = tracked_device;
      }
    }
    if (st.process_rss > 0) {
      size_t tracked = tier_total(st.at_end, Tier::host);
      if (device_is_host_memory(p.run)) tracked += tracked_device;
      const int64_t gap = static_cast<int64_t>(st.process_rss) - static_cast<int64_t>(tracked);
      if (gap > s.unaccounted_process) {
        s.unaccounted_process = gap;
        s.process_rss = st.process_rss;
        s.tracked_process = tracked;
      }
    }
    if (st.host_available > 0) {
      s.host_available =
          seen_available ? std::min(s.host_available, st.host_available) : st.host_available;
      seen_available = true;
    }
    if (i < first_steady) continue;
    s.mean_step_s += st.counters.step_s;
    stall_counter += st.counters.stall_s;
    stall_track += st.tracks[static_cast<size_t>(Track::stall)].seconds;
    s.prefetch_hits += st.counters.prefetch_hits;
    s.on_demand_fetches += st.counters.on_demand_fetches;
    s.reductions += static_cast<double>(st.counters.reductions);
    s.reduction_s += st.counters.reduction_s;
    s.reduction_exposed_s += st.counters.reduction_exposed_s;
    for (const PhaseSegment& seg : st.phases)
      if (seg.phase == Phase::forward || seg.phase == Phase::backward)
        forward_backward_s += seg.end_s - seg.start_s;
    for (size_t t = 0; t < kNumTracks; ++t) {
      s.track_per_step[t].busy_s += std::min(st.tracks[t].busy_s, st.counters.step_s);
      s.track_per_step[t].seconds += st.tracks[t].seconds;
      s.track_per_step[t].bytes += st.tracks[t].bytes;
      counts[t] += static_cast<double>(st.tracks[t].count);
    }
  }
  if (s.steady_steps > 0) {
    const auto n = static_cast<double>(s.steady_steps);
    s.mean_step_s /= n;
    s.mean_stall_s = (stall_counter > 0.0 ? stall_counter : stall_track) / n;
    s.reductions /= n;
    s.reduction_s /= n;
    s.reduction_exposed_s /= n;
    for (size_t t = 0; t < kNumTracks; ++t) {
      s.track_per_step[t].busy_s /= n;
      s.track_per_step[t].seconds /= n;
      s.track_per_step[t].bytes /= s.steady_steps;
      s.track_per_step[t].count = static_cast<size_t>(counts[t] / n + 0.5);
    }
    const TrackStep& compute = s.track_per_step[static_cast<size_t>(Track::compute)];
    s.compute_from_phases = compute.count == 0;
    s.compute_s =
        s.compute_from_phases
            ? std::max(0.0, forward_backward_s / n -
                                s.track_per_step[static_cast<size_t>(Track::stall)].busy_s)
            : compute.busy_s;
  }
  return s;
}

std::vector<EngineBusy> engine_busy(const Profile& p, const ProfileSummary& s) {
  const auto busy = [&](Track t) {
    return t == Track::compute ? s.compute_s : s.track_per_step[static_cast<size_t>(t)].busy_s;
  };
  std::vector<EngineBusy> out;
  if (device_is_host_memory(p.run)) {
    out.push_back({"cpu (compute, copies, optimizer)",
                   busy(Track::compute) + busy(Track::host_to_device) +
                       busy(Track::device_to_host) + busy(Track::optimizer)});
  } else {
    out.push_back({"device compute", busy(Track::compute)});
    out.push_back({"host -> device copies", busy(Track::host_to_device)});
    out.push_back({"device -> host copies", busy(Track::device_to_host)});
    out.push_back({"cpu optimizer", busy(Track::optimizer)});
  }
  out.push_back({"nvme (reads + writes)", busy(Track::nvme_read) + busy(Track::nvme_write)});
  if (p.run.ranks > 1) out.push_back({"network (collectives)", busy(Track::collective)});
  std::erase_if(out, [](const EngineBusy& e) { return !(e.busy_s > 0.0); });
  std::stable_sort(out.begin(), out.end(),
                   [](const EngineBusy& a, const EngineBusy& b) { return a.busy_s > b.busy_s; });
  return out;
}

}  // namespace tierzero::profile
