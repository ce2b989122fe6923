// /proc readers. Missing files give zeros, not errors: a profile is still worth having on a
// system without /proc, and the report then says nothing about unaccounted or free memory.
#include "tierzero/profile/system_memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace tierzero::profile {

size_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(f, "%llu %llu", &size_pages, &resident_pages);
  std::fclose(f);
  if (n != 2) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  return static_cast<size_t>(resident_pages) * static_cast<size_t>(page > 0 ? page : 4096);
}

HostMemory read_host_memory() {
  HostMemory m;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemTotal: %llu kB", &kib) == 1)
      m.total = static_cast<size_t>(kib) * 1024;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
      m.available = static_cast<size_t>(kib) * 1024;
  }
  std::fclose(f);
  return m;
}

}  // namespace tierzero::profile
