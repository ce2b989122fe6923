// The HTML report of a run profile (`tierzero report`): one self-contained file, no network
// (inline CSS, inline script drawing SVG). It shows a stacked chart of memory over a step per
// tier and category, the peak table, where each unit's states live, prefetch and stall counters
// per step, predicted against measured bytes, time per activity and bytes per link, and the
// recommendations. The script sets <body data-rendered="ok"> when it has drawn everything, and
// on any script error writes it into a visible element and <body data-error="...">, so a
// headless browser can tell a good page from a broken one. Given every rank's profile, it puts
// the ranks side by side first.
#pragma once

#include <string>

#include "tierzero/profile/profile.hpp"
#include "tierzero/profile/rank_profiles.hpp"

namespace tierzero::profile {

std::string render_html_report(const Profile& p, const std::string& source_name = "");
void write_html_report(const Profile& p, const std::string& path,
                       const std::string& source_name = "");

// Several ranks of one run: a "Ranks" section (per-rank step times and peaks, their imbalance,
// missing ranks) above the slowest rank's own report, and the same figures as JSON in
// <script type="application/json" id="tz-ranks"> (rank_comparison_json). One profile of a
// one-rank run gives the single-profile page.
std::string render_html_report(const RankProfiles& rp);
void write_html_report(const RankProfiles& rp, const std::string& path);

}  // namespace tierzero::profile
