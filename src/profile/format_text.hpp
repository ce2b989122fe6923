// printf-style formatting into a std::string, checked by the compiler like printf itself; the
// report and the recommendations build their sentences and table cells with it.
#pragma once

#include <string>

namespace tierzero::profile {

__attribute__((format(printf, 1, 2))) std::string format_text(const char* fmt, ...);

}  // namespace tierzero::profile
