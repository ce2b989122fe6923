// Machine-wide CPU time by kind (user, system, iowait, steal...) from /proc/stat, so a benchmark
// can show what a run cost the machine besides its own compute: on a virtual machine, disk
// traffic is partly paid as steal time (the hypervisor's own work on the guest's vCPUs), which
// the guest's step times include but its user/system times do not.
#pragma once

namespace tierzero::bench {

struct MachineCpuTimes {
  bool valid = false;  // false where /proc/stat could not be read
  double user_s = 0.0, system_s = 0.0, idle_s = 0.0, iowait_s = 0.0, steal_s = 0.0;
};

MachineCpuTimes read_machine_cpu_times();
// later - earlier, field by field; invalid if either is
MachineCpuTimes operator-(const MachineCpuTimes& later, const MachineCpuTimes& earlier);

}  // namespace tierzero::bench
