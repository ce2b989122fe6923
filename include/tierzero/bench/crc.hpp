// `tierzero bench crc`: TierZero's own CRC32C (its fastest kernel on this CPU) against ISA-L's
// crc32_iscsi on one buffer in memory, GB/s of each (best and median of the repeats), and a
// check that both give the same checksum. These numbers are why the NVMe swap and the
// checkpoints use ISA-L's (docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchCrcOptions {
  int64_t mib = 256;     // buffer size
  int64_t repeats = 15;  // runs of each kernel, alternating
};

struct BenchCrcResult {
  size_t bytes = 0;          // checksummed by each kernel in each run
  int64_t repeats = 0;       // runs of each kernel
  std::string kernel;        // ours: folding, SSE4.2 or table
  double gbps = 0.0;         // ours, best run
  double median_gbps = 0.0;  // ours, median run
  double isal_gbps = 0.0;    // the baseline, best run
  double isal_median_gbps = 0.0;
  uint32_t crc = 0;    // the checksum both kernels gave
  BenchReport report;  // the crc32c line
};

// Runs the benchmark: lines on stderr, one JSON object (crc32c) on stdout. Throws Error without
// ISA-L in the build, or when the two checksums differ.
BenchCrcResult bench_crc(const BenchCrcOptions& options);

}  // namespace tierzero::bench
