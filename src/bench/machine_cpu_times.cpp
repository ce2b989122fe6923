// /proc/stat's first line ("cpu  user nice system idle iowait irq softirq steal ...", in clock
// ticks summed over every CPU) read into seconds.
#include "machine_cpu_times.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace tierzero::bench {

MachineCpuTimes read_machine_cpu_times() {
  MachineCpuTimes t;
  std::ifstream f("/proc/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return t;
  std::istringstream in(line);
  std::string label;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (!in || label != "cpu" || ticks <= 0) return t;
  const auto s = [ticks](unsigned long long v) {
    return static_cast<double>(v) / static_cast<double>(ticks);
  };
  t.valid = true;
  t.user_s = s(user + nice);
  t.system_s = s(system + irq + softirq);
  t.idle_s = s(idle);
  t.iowait_s = s(iowait);
  t.steal_s = s(steal);
  return t;
}

MachineCpuTimes operator-(const MachineCpuTimes& later, const MachineCpuTimes& earlier) {
  // The kernel's iowait (and, on some hypervisors, idle) counters can step backwards between two
  // reads; a negative interval means "none seen", not time given back.
  auto since = [](double a, double b) { return std::max(a - b, 0.0); };
  MachineCpuTimes d;
  d.valid = later.valid && earlier.valid;
  d.user_s = since(later.user_s, earlier.user_s);
  d.system_s = since(later.system_s, earlier.system_s);
  d.idle_s = since(later.idle_s, earlier.idle_s);
  d.iowait_s = since(later.iowait_s, earlier.iowait_s);
  d.steal_s = since(later.steal_s, earlier.steal_s);
  return d;
}

}  // namespace tierzero::bench
