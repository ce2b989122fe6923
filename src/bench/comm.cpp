// `tierzero bench comm`: algorithm and bus bandwidth (nccl-tests' definitions) of every collective
// of the MPI backend, for message sizes from 1 KiB to 256 MiB, each measured in the same run
// against the raw MPI call it is built on (MPI_Allgather, MPI_Reduce_scatter_block, ...), and
// each result checked element by element. Table on stderr, one JSON object per result on stdout.
// Times are medians; the ratio is the median of per-iteration raw/ours ratios, each pair timed
// back to back, so that a shared machine's background load cancels out.
// For bf16/fp16 the reductions' baseline is raw MPI in fp32 on the same element count, because
// MPI cannot sum 16-bit floats: the ratio is then the cost of widening to fp32.
#include "tierzero/bench/comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "tierzero/bench/results.hpp"
#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_allocator.hpp"

namespace tierzero::bench {

namespace {

using comm::Communicator;
using comm::ReduceOp;

enum class Op { all_gather, reduce_scatter, all_reduce, broadcast, all_to_all, send_recv };
constexpr Op kOps[] = {Op::all_gather, Op::reduce_scatter, Op::all_reduce,
                       Op::broadcast,  Op::all_to_all,     Op::send_recv};

const char* op_name(Op op) {
  switch (op) {
    case Op::all_gather:
      return "all_gather";
    case Op::reduce_scatter:
      return "reduce_scatter";
    case Op::all_reduce:
      return "all_reduce";
    case Op::broadcast:
      return "broadcast";
    case Op::all_to_all:
      return "all_to_all";
    case Op::send_recv:
      return "send_recv";
  }
  return "?";
}

const char* raw_name(Op op) {
  switch (op) {
    case Op::all_gather:
      return "MPI_Allgather";
    case Op::reduce_scatter:
      return "MPI_Reduce_scatter_block";
    case Op::all_reduce:
      return "MPI_Allreduce";
    case Op::broadcast:
      return "MPI_Bcast";
    case Op::all_to_all:
      return "MPI_Alltoall";
    case Op::send_recv:
      return "MPI_Sendrecv";
  }
  return "?";
}

// nccl-tests' bus bandwidth factor: what each rank's links carry relative to the message size.
double bus_factor(Op op, int n) {
  const double r = static_cast<double>(n);
  switch (op) {
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
      return (r - 1.0) / r;
    case Op::all_reduce:
      return 2.0 * (r - 1.0) / r;
    case Op::broadcast:
    case Op::send_recv:
      return 1.0;
  }
  return 1.0;
}

bool is_reduction(Op op) {
  return op == Op::reduce_scatter || op == Op::all_reduce;
}

// Elements per rank-block for a message of `bytes` (nccl-tests' size: the whole gathered,
// scattered or exchanged buffer), and the bytes actually moved after rounding down.
size_t block_count(Op op, size_t bytes, int n, size_t esize) {
  const bool per_rank = op == Op::all_gather || op == Op::reduce_scatter || op == Op::all_to_all;
  return per_rank ? bytes / (static_cast<size_t>(n) * esize) : bytes / esize;
}
size_t message_bytes(Op op, size_t count, int n, size_t esize) {
  const bool per_rank = op == Op::all_gather || op == Op::reduce_scatter || op == Op::all_to_all;
  return count * esize * (per_rank ? static_cast<size_t>(n) : 1);
}

// Small integers, so that sums over ranks are exact in every dtype and checks can be exact.
float pattern(int rank, size_t i) {
  return static_cast<float>((static_cast<size_t>(rank) * 7 + i) % 16);
}

std::string size_label(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0)
    return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void mpi_check(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];  // (MPI_MAX_ERROR_STRING) chars
  int length = 0;
  MPI_Error_string(status, text, &length);
  TZ_THROW(std::string("bench comm: raw ") + what +
               " failed: " + std::string(text, static_cast<size_t>(length)),
           "check the other ranks' output");
}

struct Buffers {
  DeviceBuffer send;      // (max_bytes) pattern(rank, i) in the bench dtype
  DeviceBuffer recv;      // (max_bytes)
  DeviceBuffer send_f32;  // (2 * max_bytes) fp32 pattern, reduction baselines of 16-bit dtypes
  DeviceBuffer recv_f32;  // (2 * max_bytes)
};

class CommBench {
 public:
  CommBench(Communicator& c, const BenchCommOptions& o, DType dtype, Buffers& b)
      : c_(c), o_(o), dtype_(dtype), esize_(dtype_size(dtype)), b_(b) {}

  // One raw-MPI run of `op` on `count`-element blocks.
  void run_raw(Op op, size_t count) {
    const int n = static_cast<int>(count);
    const bool wide = is_reduction(op) && dtype_ != DType::f32;
    void* s = wide ? b_.send_f32.data() : b_.send.data();
    void* r = wide ? b_.recv_f32.data() : b_.recv.data();
    const MPI_Datatype t = dtype_ == DType::f32 || wide ? MPI_FLOAT : MPI_UINT16_T;
    const int next = (c_.rank() + 1) % c_.size(), prev = (c_.rank() + c_.size() - 1) % c_.size();
    switch (op) {
      case Op::all_gather:
        return mpi_check(MPI_Allgather(s, n, t, r, n, t, MPI_COMM_WORLD), raw_name(op));
      case Op::reduce_scatter:
        return mpi_check(MPI_Reduce_scatter_block(s, r, n, t, MPI_SUM, MPI_COMM_WORLD),
                         raw_name(op));
      case Op::all_reduce:
        return mpi_check(MPI_Allreduce(s, r, n, t, MPI_SUM, MPI_COMM_WORLD), raw_name(op));
      case Op::broadcast:
        return mpi_check(MPI_Bcast(r, n, t, 0, MPI_COMM_WORLD), raw_name(op));
      case Op::all_to_all:
        return mpi_check(MPI_Alltoall(s, n, t, r, n, t, MPI_COMM_WORLD), raw_name(op));
      case Op::send_recv:
        return mpi_check(
            MPI_Sendrecv(s, n, t, next, 0, r, n, t, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            raw_name(op));
    }
  }

  // One run of `op` through the comm layer.
  void run_ours(Op op, size_t count) {
    void* s = b_.send.data();
    void* r = b_.recv.data();
    const int next = (c_.rank() + 1) % c_.size(), prev = (c_.rank() + c_.size() - 1) % c_.size();
    switch (op) {
      case Op::all_gather:
        return c_.all_gather(s, r, count, dtype_);
      case Op::reduce_scatter:
        return c_.reduce_scatter(s, r, count, dtype_, ReduceOp::sum);
      case Op::all_reduce:
        return c_.all_reduce(s, r, count, dtype_, ReduceOp::sum);
      case Op::broadcast:
        return c_.broadcast(r, count, dtype_, 0);
      case Op::all_to_all:
        return c_.all_to_all(s, r, count, dtype_);
      case Op::send_recv: {
        comm::CommRequest in = c_.recv_async(r, count, dtype_, prev);
        comm::CommRequest out = c_.send_async(s, count, dtype_, next);
        out.wait();
        in.wait();
        return;
      }
    }
  }

  // Runs `op` once more from a poisoned output and checks every element; true when all match.
  bool check(Op op, size_t count) {
    const int n = c_.size(), me = c_.rank();
    const size_t un = static_cast<size_t>(n);
    const size_t out_count = op == Op::all_gather || op == Op::all_to_all ? count * un : count;
    std::memset(b_.recv.data(), 0xff, out_count * esize_);  // NaN in every dtype
    if (op == Op::broadcast && me == 0) std::memcpy(b_.recv.data(), b_.send.data(), count * esize_);
    run_ours(op, count);
    std::vector<float> got(out_count);  // (out_count)
    convert_to_f32(got.data(), b_.recv.data(), dtype_, out_count);
    size_t bad = 0;
    for (size_t k = 0; k < out_count; ++k) {
      float want = 0.0f;
      const size_t block = k / std::max<size_t>(count, 1), j = k % std::max<size_t>(count, 1);
      switch (op) {
        case Op::all_gather:
          want = pattern(static_cast<int>(block), j);
          break;
        case Op::reduce_scatter:
          for (int r = 0; r < n; ++r) want += pattern(r, static_cast<size_t>(me) * count + k);
          break;
        case Op::all_reduce:
          for (int r = 0; r < n; ++r) want += pattern(r, k);
          break;
        case Op::broadcast:
          want = pattern(0, k);
          break;
        case Op::all_to_all:
          want = pattern(static_cast<int>(block), static_cast<size_t>(me) * count + j);
          break;
        case Op::send_recv:
          want = pattern((me + n - 1) % n, k);
          break;
      }
      if (got[k] != want) ++bad;
    }
    int ok = bad == 0 ? 1 : 0, all_ok = 0;
    mpi_check(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "check");
    return all_ok == 1;
  }

  // Seconds of one run, the slowest rank's, after a barrier so every rank starts together.
  template <typename Run>
  double time_once(Run&& run) {
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    Timer t;
    run();
    double mine = t.seconds(), slowest = 0.0;
    mpi_check(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
              "timing reduction");
    return slowest;
  }

  struct Result {
    double ours_s = 0.0;  // median seconds
    double raw_s = 0.0;   // median seconds
    double ratio = 0.0;   // median over iterations of raw / ours, each pair timed back to back
    bool ok = false;
  };

  Result measure(Op op, size_t count, size_t bytes) {
    // Enough iterations that the median shrugs off a neighbour's burst on a shared machine.
    const int iters = bytes < (size_t{1} << 20) ? std::max(o_.iters, 20) : o_.iters;
    std::vector<double> ours, raw, ratios;
    for (int i = 0; i <= iters; ++i) {  // i == 0 warms up both paths; interleaved against drift
      // Alternate which goes first, so that neither gains from running second.
      double r = 0.0, m = 0.0;
      if (i % 2 == 0) {
        r = time_once([&] { run_raw(op, count); });
        m = time_once([&] { run_ours(op, count); });
      } else {
        m = time_once([&] { run_ours(op, count); });
        r = time_once([&] { run_raw(op, count); });
      }
      if (i > 0) {
        raw.push_back(r);
        ours.push_back(m);
        ratios.push_back(r / m);
      }
    }
    return {median(ours), median(raw), median(ratios), check(op, count)};
  }

 private:
  Communicator& c_;
  const BenchCommOptions& o_;
  DType dtype_;
  size_t esize_;
  Buffers& b_;
};

std::vector<Op> parse_ops(const std::string& list) {
  if (list == "all") return std::vector<Op>(std::begin(kOps), std::end(kOps));
  std::vector<Op> ops;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    bool found = false;
    for (Op op : kOps)
      if (name == op_name(op)) {
        ops.push_back(op);
        found = true;
      }
    TZ_CHECK(found, "bench comm: unknown operation \"" + name + "\"",
             "use all, or a comma list of all_gather, reduce_scatter, all_reduce, broadcast, "
             "all_to_all, send_recv");
  }
  return ops;
}

BenchReport run_in_job(const BenchCommOptions& o) {
  int argc = 0;
  char** argv = nullptr;
  comm::MpiSession mpi(&argc, &argv);
  Communicator& world = mpi.world();
  const int n = world.size(), me = world.rank();
  const DType dtype = dtype_from_name(o.dtype);
  const size_t esize = dtype_size(dtype);
  const std::vector<Op> ops = parse_ops(o.ops);
  TZ_CHECK(o.min_bytes >= 1 && o.min_bytes <= o.max_bytes,
           "bench comm: --min-bytes must be between 1 and --max-bytes", "e.g. 1024 and 268435456");

  std::unique_ptr<Device> cpu = make_cpu_device(1);
  DeviceAllocator alloc(*cpu, 0);
  Buffers b;
  b.send = alloc.allocate(o.max_bytes, Category::comm, "bench comm send");
  b.recv = alloc.allocate(o.max_bytes, Category::comm, "bench comm recv");
  const size_t elements = o.max_bytes / esize;
  {
    std::vector<float> values(elements);  // (elements)
    for (size_t i = 0; i < elements; ++i) values[i] = pattern(me, i);
    convert_from_f32(b.send.data(), dtype, values.data(), elements);
    if (dtype != DType::f32) {
      b.send_f32 = alloc.allocate(elements * sizeof(float), Category::comm, "bench fp32 send");
      b.recv_f32 = alloc.allocate(elements * sizeof(float), Category::comm, "bench fp32 recv");
      std::memcpy(b.send_f32.data(), values.data(), elements * sizeof(float));
    }
  }
  std::memset(b.recv.data(), 0, o.max_bytes);  // touch the pages before timing

  if (me == 0) {
    std::fprintf(stderr,
                 "bench comm: MPI backend vs raw MPI, %d ranks, %s, median of %d iterations "
                 "(>= 20 below 1 MiB); busbw per nccl-tests; ratio = median of raw/ours pairs\n",
                 n, dtype_name(dtype), o.iters);
    std::fprintf(stderr, "  %-9s %-15s %11s %9s %9s | %-24s %11s %9s | %6s %5s\n", "size", "op",
                 "time us", "algbw", "busbw", "baseline", "time us", "busbw", "ratio", "check");
  }
  CommBench bench(world, o, dtype, b);
  BenchReport report;
  for (Op op : ops) {
    for (size_t size = o.min_bytes; size <= o.max_bytes; size *= 4) {
      const size_t count = block_count(op, size, n, esize);
      if (count == 0) continue;
      const size_t bytes = message_bytes(op, count, n, esize);
      const CommBench::Result r = bench.measure(op, count, bytes);
      report.passed = report.passed && r.ok;
      if (me != 0) continue;
      const double gb = static_cast<double>(bytes) / 1e9;
      const double algbw = gb / r.ours_s, busbw = algbw * bus_factor(op, n);
      const double raw_busbw = gb / r.raw_s * bus_factor(op, n);
      const double ratio = r.ratio;
      const std::string baseline =
          std::string(raw_name(op)) + (is_reduction(op) && dtype != DType::f32 ? " fp32" : "");
      std::fprintf(stderr, "  %-9s %-15s %11.1f %9.3f %9.3f | %-24s %11.1f %9.3f | %6.3f %5s\n",
                   size_label(bytes).c_str(), op_name(op), r.ours_s * 1e6, algbw, busbw,
                   baseline.c_str(), r.raw_s * 1e6, raw_busbw, ratio, r.ok ? "OK" : "FAIL");
      // The headline names (DESIGN.md) are the 64 MiB results; other sizes carry the size.
      std::string name = std::string("comm.") + op_name(op);
      if (bytes != (size_t{64} << 20)) name += "." + size_label(bytes);
      if (dtype != DType::f32) name += std::string(".") + dtype_name(dtype);
      nlohmann::ordered_json j =
          bench_result(name, round_to(busbw, 4), "GB/s", "mpi", round_to(raw_busbw, 4), ratio);
      j["algbw"] = round_to(algbw, 4);
      j["bytes"] = bytes;
      j["ranks"] = n;
      j["dtype"] = dtype_name(dtype);
      j["time_us"] = round_to(r.ours_s * 1e6, 2);
      j["baseline_time_us"] = round_to(r.raw_s * 1e6, 2);
      j["check"] = r.ok;
      report.emit(j);
    }
  }
  if (me == 0 && !report.passed)
    std::fprintf(stderr, "bench comm: some results FAILED their check\n");
  return report;
}

}  // namespace

BenchReport bench_comm(const BenchCommOptions& o) {
  if (!comm::launched_by_mpi()) {
    comm::exec_under_mpiexec(
        o.ranks, {"bench", "comm", "--min-bytes", std::to_string(o.min_bytes), "--max-bytes",
                  std::to_string(o.max_bytes), "--iters", std::to_string(o.iters), "--ops", o.ops,
                  "--dtype", o.dtype});
  }
  return run_in_job(o);
}

}  // namespace tierzero::bench
