// `tierzero bench crc`: TierZero's own CRC32C (its fastest kernel on this CPU) against ISA-L's
// crc32_iscsi on one buffer in memory, GB/s of each (best and median of the repeats), and a
// check that both give the same checksum. These numbers are why the NVMe swap and the
// checkpoints use ISA-L's (docs/benchmarks.md).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tierzero::bench {

// Adds the subcommand to `bench`; the function returned runs it when it was parsed (returning
// its exit code) and returns -1 otherwise.
std::function<int()> add_bench_crc_command(CLI::App& bench);

}  // namespace tierzero::bench
