// The HTML report of a run profile (`tierzero report`): one self-contained file, no network
// (inline CSS, inline script drawing SVG). It shows a stacked chart of memory over a step per
// tier and category, the peak table, where each unit's states live, prefetch and stall counters
// per step, predicted against measured bytes, time per activity and bytes per link, and the
// recommendations. The script sets <body data-rendered="ok"> when it has drawn everything, and
// on any script error writes it into a visible element and <body data-error="...">, so a
// headless browser can tell a good page from a broken one.
#pragma once

#include <string>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

std::string render_html_report(const Profile& p, const std::string& source_name = "");
void write_html_report(const Profile& p, const std::string& path,
                       const std::string& source_name = "");

}  // namespace tierzero::profile
