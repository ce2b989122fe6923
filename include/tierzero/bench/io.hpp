// `tierzero bench io`: the offload layer's NVMe path against fio on the same drive, same run.
// Sequential write and read of one swap (size, block size, queue depth, O_DIRECT all equal to
// fio's), and the streaming pipeline (read, touch every byte, write back). The checked engine
// (a CRC32C per chunk, recorded on write and checked on read) gives the headline figures; a
// second engine with the checksums off does fio's work exactly, in the same repeats, and gives
// the raw ones. Prints a table on stderr and one JSON object per result (io.write, io.read,
// io.stream, io.write_raw, io.read_raw) on stdout.
#pragma once

#include <cstddef>
#include <string>

#include "tierzero/bench/results.hpp"

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

// Rates in bytes per second, medians over the repeats.
struct BenchIoResult {
  size_t bytes = 0;            // of swap written and read in each repeat
  bool direct = false;         // O_DIRECT on (TierZero and fio alike)
  double write_Bps = 0.0;      // TierZero's sequential write
  double read_Bps = 0.0;       // and read
  double stream_Bps = 0.0;     // tensor bytes streamed (each read and written once)
  double fio_write_Bps = 0.0;  // the ceilings: fio, the better of plain and fixed buffers
  double fio_read_Bps = 0.0;
  double raw_write_Bps = 0.0;  // the engine with the checksums off (fio's work)
  double raw_read_Bps = 0.0;
  size_t engine_bytes_written = 0;  // everything the checked engine wrote (stream included)
  size_t engine_bytes_read = 0;
  size_t raw_engine_bytes_written = 0;  // the raw engine's (its swap only)
  size_t raw_engine_bytes_read = 0;
  BenchReport report;  // io.write, io.read, io.stream, io.write_raw, io.read_raw
};

// Runs the benchmark: table on stderr, five JSON objects on stdout. Throws tierzero::Error on
// failure (no fio, not enough disk space, an I/O error).
BenchIoResult bench_io(const BenchIoOptions& options);

}  // namespace tierzero::bench
