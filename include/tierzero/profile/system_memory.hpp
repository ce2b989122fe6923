// What the operating system says about memory: this process's resident bytes (/proc/self/statm)
// and the machine's total and available memory (/proc/meminfo). The recorder sets these beside
// the tracked bytes so the report can show memory nobody accounted for and memory still free.
#pragma once

#include <cstddef>

namespace tierzero::profile {

size_t process_rss_bytes();  // 0 where /proc is unavailable

struct HostMemory {
  size_t total = 0;      // MemTotal
  size_t available = 0;  // MemAvailable
};
HostMemory read_host_memory();  // zeros where /proc is unavailable

}  // namespace tierzero::profile
