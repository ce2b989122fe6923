// Trace export: the profile's fine-grained timeline as a Chrome trace / Perfetto JSON
// ({"traceEvents": [...]}), so overlap of compute, collectives, copies and NVMe I/O can be seen.
// One process per rank (pid = rank), one thread per activity track (compute, collective,
// host_to_device, device_to_host, nvme_read, nvme_write, optimizer, stall) plus step and phase
// tracks, "X" complete events for activities, and "C" counter events per tier for memory
// (one series per category). Open it in ui.perfetto.dev or chrome://tracing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

// Throws Error when the profile has no timeline (it was recorded without the fine-grained
// option). `source` names the profile file in that error.
std::string trace_text(const Profile& p, const std::string& source = "the profile");
nlohmann::json trace_json(const Profile& p, const std::string& source = "the profile");  // parsed
void write_trace(const Profile& p, const std::string& path,
                 const std::string& source = "the profile");

// Several ranks of one run in one trace, each rank its own process (pid = rank). Ranks that ran
// on one host (RunInfo::host) share its clock and keep their offsets; `sources` name the
// profiles in errors (one per profile).
std::string trace_text(const std::vector<Profile>& ranks, const std::vector<std::string>& sources);
// Writes `text` (trace_text's) to `path`; throws Error when it cannot.
void write_trace_text(const std::string& text, const std::string& path);

}  // namespace tierzero::profile
