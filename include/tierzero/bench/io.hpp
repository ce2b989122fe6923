// `tierzero bench io`: the offload layer's NVMe path against fio on the same drive, same run.
// Sequential write and read of one swap (size, block size, queue depth, O_DIRECT all equal to
// fio's), and the streaming pipeline (read, touch every byte, write back). Prints a table on
// stderr and one JSON object per result (io.write, io.read, io.stream) on stdout.
#pragma once

#include <cstddef>
#include <string>

namespace tierzero::bench {

struct BenchIoOptions {
  std::string dir;                                // empty: a fresh directory under /var/tmp or "."
  size_t size = size_t{2} << 30;                  // bytes of swap written and read
  size_t block = size_t{1} << 20;                 // request size (fio --bs, aio.block_size)
  size_t queue_depth = 32;                        // requests in flight (fio --iodepth)
  size_t repeats = 5;                             // each measure is the median of this many runs
  size_t stream_buffers = 8;                      // staging buffers of the streaming pipeline
  size_t stream_buffer_bytes = size_t{32} << 20;  // bytes per staging buffer
  std::string fio = "fio";                        // the fio executable
};

// Runs the benchmark; returns the process exit code. Throws tierzero::Error on failure
// (no fio, not enough disk space, an I/O error).
int run_bench_io(const BenchIoOptions& options);

}  // namespace tierzero::bench
