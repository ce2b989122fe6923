// `tierzero bench io` (see io.hpp). fio runs as a subprocess with the same file size, block
// size, queue depth, O_DIRECT and io_uring engine; its JSON report gives the baseline. Every
// measure is the median of `repeats` runs, fio and TierZero alternating so that both see the
// drive in the same state. TierZero's reads check every chunk's CRC32C, so the benchmark also
// checks its result; a second engine with the checksums off measures the raw I/O, the same work
// fio does (io.write_raw, io.read_raw), in the same repeats.
#include "tierzero/bench/io.hpp"

#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tierzero/bench/results.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/offload/host_pool.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/stream_pipeline.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::bench {

namespace {

using namespace tierzero::offload;

constexpr long kTmpfsMagic = 0x01021994;

bool usable_disk_dir(const std::string& dir) {
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return false;
  return static_cast<long>(fs.f_type) != kTmpfsMagic && access(dir.c_str(), W_OK) == 0;
}

// A private directory for the run, removed (with fio's file) at the end.
class BenchDir {
 public:
  explicit BenchDir(const std::string& base) {
    std::string templ = base + "/tierzero-bench-io-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      TZ_THROW("cannot create a benchmark directory in " + base + ": " + errno_string(),
               "pass --dir with a writable directory on the drive to measure");
    path_ = buf.data();
  }
  ~BenchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  BenchDir(const BenchDir&) = delete;
  BenchDir& operator=(const BenchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs argv without a shell; returns fio's stdout. Throws Error naming the command on failure.
std::string run_capture(const std::vector<std::string>& argv) {
  int fds[2];
  TZ_CHECK_ERRNO(pipe(fds), "pipe for fio");
  const pid_t pid = fork();
  TZ_CHECK_ERRNO(pid, "fork for fio");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;  // (argv.size() + 1) null-terminated for execvp
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[8192];
  ssize_t got = 0;
  while ((got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
    TZ_THROW("could not run fio: " + cmd, "install fio (apt-get install fio; scripts/setup.sh)");
  if (WEXITSTATUS(status) != 0)
    TZ_THROW("fio failed (exit " + std::to_string(WEXITSTATUS(status)) + "): " + cmd,
             "run the command by hand to see fio's message");
  return out;
}

struct Fio {
  const BenchIoOptions& o;
  std::string file;
  std::string engine = "io_uring";

  // `fixed`: fio's own registered buffers and files (--fixedbufs --registerfiles), as TierZero
  // uses; the baseline is the better of the two ways.
  std::vector<std::string> argv(const char* rw, bool fixed) const {
    std::vector<std::string> a = {o.fio,
                                  "--name=tierzero-bench-" + std::string(rw),
                                  "--filename=" + file,
                                  "--size=" + std::to_string(o.size),
                                  "--bs=" + std::to_string(o.block),
                                  "--iodepth=" + std::to_string(o.queue_depth),
                                  "--direct=1",
                                  "--ioengine=" + engine,
                                  "--rw=" + std::string(rw),
                                  "--numjobs=1",
                                  "--output-format=json"};
    if (fixed && engine == "io_uring") {
      a.emplace_back("--fixedbufs");
      a.emplace_back("--registerfiles");
    }
    return a;
  }
  std::string command(const char* rw, bool fixed) const {
    std::string s;
    for (const auto& a : argv(rw, fixed)) s += (s.empty() ? "" : " ") + a;
    return s;
  }
  // Bytes per second fio reports for one sequential pass.
  double run(const char* rw, bool fixed) {
    std::string out;
    try {
      out = run_capture(argv(rw, fixed));
    } catch (const Error&) {
      if (engine != "io_uring") throw;
      engine = "libaio";  // fio built without io_uring, or io_uring refused: the classic engine
      out = run_capture(argv(rw, fixed));
    }
    const size_t brace = out.find('{');  // fio may print notes before the JSON
    TZ_CHECK(brace != std::string::npos, "fio printed no JSON report for " + command(rw, fixed),
             "run the command by hand");
    const nlohmann::json report = nlohmann::json::parse(out.substr(brace));
    const auto& job = report.at("jobs").at(0).at(std::string(rw) == "write" ? "write" : "read");
    const double bytes = job.at("io_bytes").get<double>();
    const double ms = job.at("runtime").get<double>();
    TZ_CHECK(ms > 0 && bytes > 0, "fio reported no I/O for " + command(rw, fixed),
             "run it by hand");
    return bytes / (ms / 1e3);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One result line; `extra` holds the result's own fields.
nlohmann::ordered_json result_json(const char* name, double value, double baseline,
                                   const BenchIoOptions& o, const std::string& dir, bool direct,
                                   const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json j = bench_result(name, round_to(value / 1e9, 4), "GB/s", "fio",
                                          round_to(baseline / 1e9, 4), value / baseline);
  j["size"] = o.size;
  j["block"] = o.block;
  j["queue_depth"] = o.queue_depth;
  j["direct"] = direct;
  j["dir"] = dir;
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

}  // namespace

BenchIoResult bench_io(const BenchIoOptions& o) {
  TZ_CHECK(o.size >= o.block && o.block % kIoAlignment == 0 && o.queue_depth >= 1 &&
               o.repeats >= 1 && o.stream_buffers >= 2 &&
               o.stream_buffer_bytes % kIoAlignment == 0 && o.stream_buffer_bytes > 0,
           "bench io: --size must be >= --block, --block and the stream buffer size multiples of "
           "4096, and --queue-depth, --repeats >= 1",
           "for example: tierzero bench io --size 2G --block 1M --queue-depth 32");
  std::string base = o.dir;
  if (base.empty()) {
    for (const char* candidate : {"/var/tmp", "."}) {
      if (usable_disk_dir(candidate)) {
        base = candidate;
        break;
      }
    }
    TZ_CHECK(!base.empty(), "no writable directory on a real disk (/var/tmp and . are tmpfs)",
             "pass --dir on the drive to measure");
  }
  struct statvfs vfs {};
  TZ_CHECK_ERRNO(statvfs(base.c_str(), &vfs), "statvfs " + base);
  const auto free_bytes = static_cast<size_t>(vfs.f_bavail) * vfs.f_frsize;
  const size_t need = 4 * o.size + (size_t{1} << 30);  // fio file, 2 swaps, stream tensor
  TZ_CHECK(free_bytes >= need,
           "bench io needs " + format_bytes(need) + " free in " + base +
               " (fio's file, two swaps and the streamed tensor), but there are " +
               format_bytes(free_bytes),
           "pass a smaller --size or a --dir with more room");
  BenchDir dir(base);

  // TierZero: one engine, the whole swap as 64 MiB extents written from / read into pinned
  // memory registered with io_uring (so both sides do zero-copy O_DIRECT I/O).
  NvmeOptions no;
  no.directories = {dir.path()};
  no.block_size = o.block;
  no.queue_depth = o.queue_depth;
  const size_t extent_bytes = std::min<size_t>(o.size, size_t{64} << 20);
  const size_t host_bytes = HostPool::round_size(o.size) +
                            o.stream_buffers * HostPool::round_size(o.stream_buffer_bytes) +
                            2 * o.queue_depth * HostPool::round_size(o.block);
  HostPool pool(host_bytes);
  NvmeEngine engine(no, &pool);
  SwapSpace swap(engine);
  NvmeOptions raw_options = no;  // the same engine doing fio's work: no CRC32C
  raw_options.checksums = false;
  NvmeEngine raw_engine(raw_options, &pool);
  SwapSpace raw_swap(raw_engine);
  PinnedBuffer data = pool.allocate(o.size, Category::io, "bench io data");  // (size) bytes
  for (size_t off = 0; off < o.size; off += size_t{1} << 30) {
    engine.register_memory(data.bytes_ptr() + off, std::min(o.size - off, size_t{1} << 30));
    raw_engine.register_memory(data.bytes_ptr() + off, std::min(o.size - off, size_t{1} << 30));
  }
  {
    auto* words = static_cast<uint64_t*>(data.data());  // (size / 8) a cheap, varied pattern
    for (size_t i = 0; i < o.size / 8; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
  }
  std::vector<Extent> extents, raw_extents;
  for (size_t off = 0; off < o.size; off += extent_bytes) {
    const size_t n = std::min(extent_bytes, o.size - off);
    extents.push_back(swap.allocate(n, Category::io, "bench"));
    raw_extents.push_back(raw_swap.allocate(n, Category::io, "bench raw"));
  }
  auto pass = [&](NvmeEngine& eng, const std::vector<Extent>& exts, bool is_write) {
    std::vector<IoHandle> handles;
    Timer t;
    size_t off = 0;
    for (const Extent& e : exts) {
      handles.push_back(is_write ? eng.write(e, data.bytes_ptr() + off)
                                 : eng.read(e, data.bytes_ptr() + off));
      off += e.bytes;
    }
    for (auto& h : handles) h.wait();
    return static_cast<double>(o.size) / t.seconds();
  };
  auto ours = [&](bool is_write) { return pass(engine, extents, is_write); };
  auto raw = [&](bool is_write) { return pass(raw_engine, raw_extents, is_write); };
  // Checked and raw in turn, alternating which goes first so neither always follows fio.
  auto both = [&](bool is_write, size_t repeat, std::vector<double>& checked,
                  std::vector<double>& unchecked) {
    if (repeat % 2 == 0) {
      checked.push_back(ours(is_write));
      unchecked.push_back(raw(is_write));
    } else {
      unchecked.push_back(raw(is_write));
      checked.push_back(ours(is_write));
    }
  };

  // The streaming pipeline over its own copy of the tensor.
  StreamPipeline pipe(engine, pool, StreamOptions{o.stream_buffers, o.stream_buffer_bytes});
  const std::vector<Extent> tensor = pipe.allocate(swap, o.size, Category::io, "bench stream");
  pipe.run(tensor, StreamPipeline::Mode::write, [&](std::byte* chunk, size_t n, size_t offset) {
    std::memcpy(chunk, data.bytes_ptr() + offset, n);
  });
  auto stream = [&] {
    Timer t;
    pipe.run(tensor, StreamPipeline::Mode::read_write_back, [](std::byte* chunk, size_t n, size_t) {
      auto* w = reinterpret_cast<uint64_t*>(chunk);  // (n / 8) touch every byte
      for (size_t i = 0; i < n / 8; ++i) w[i] ^= 0xA5A5A5A5A5A5A5A5ull;
      for (size_t i = n / 8 * 8; i < n; ++i) chunk[i] ^= std::byte{0xA5};
    });
    return 2.0 * static_cast<double>(o.size) / t.seconds();  // bytes read + bytes written
  };

  Fio fio{o, dir.path() + "/fio.bin"};
  std::vector<double> fw_plain, fw_fixed, fr_plain, fr_fixed, tw, tr, ts, rw, rr;
  for (size_t r = 0; r < o.repeats; ++r) {
    fw_plain.push_back(fio.run("write", false));
    fw_fixed.push_back(fio.run("write", true));
    both(true, r, tw, rw);
    fr_plain.push_back(fio.run("read", false));
    fr_fixed.push_back(fio.run("read", true));
    both(false, r, tr, rr);
    ts.push_back(stream());
  }
  // The baseline is fio's faster configuration by its median, one run per repeat like each of
  // ours. (The better of the two runs in each repeat, as before, took a maximum of two noisy
  // samples against one of ours, which biases the ratio below 1 on a noisy disk.)
  const double fio_w = std::max(median(fw_plain), median(fw_fixed));
  const double fio_r = std::max(median(fr_plain), median(fr_fixed));
  const double tz_w = median(tw), tz_r = median(tr), tz_s = median(ts);
  const double raw_w = median(rw), raw_r = median(rr);
  const double low = std::min(fio_w, fio_r);
  const NvmeStats st = engine.stats();
  const NvmeStats raw_st = raw_engine.stats();

  std::fprintf(stderr,
               "bench io: %s, %s swap, %s blocks, queue depth %zu, O_DIRECT %s, median of %zu\n",
               dir.path().c_str(), format_bytes(o.size).c_str(), format_bytes(o.block).c_str(),
               o.queue_depth, engine.direct_io() ? "on" : "off", o.repeats);
  std::fprintf(stderr,
               "  fio: %s\n  fio baseline: the higher median of that and the same with %s\n",
               fio.command("write", false).c_str(), "--fixedbufs --registerfiles");
  std::fprintf(stderr,
               "  fio medians (GB/s): write %.3f, write fixed %.3f, read %.3f, read fixed %.3f\n",
               median(fw_plain) / 1e9, median(fw_fixed) / 1e9, median(fr_plain) / 1e9,
               median(fr_fixed) / 1e9);
  for (size_t r = 0; r < o.repeats; ++r) {
    std::fprintf(
        stderr,
        "  repeat %zu (GB/s): fio write %.3f / fixed %.3f, TierZero write %.3f / raw %.3f; "
        "fio read %.3f / fixed %.3f, TierZero read %.3f / raw %.3f; stream %.3f\n",
        r + 1, fw_plain[r] / 1e9, fw_fixed[r] / 1e9, tw[r] / 1e9, rw[r] / 1e9, fr_plain[r] / 1e9,
        fr_fixed[r] / 1e9, tr[r] / 1e9, rr[r] / 1e9, ts[r] / 1e9);
  }
  std::fprintf(stderr, "  %-34s %10s %10s %8s %6s\n", "measure", "TierZero", "fio", "ratio",
               "goal");
  std::fprintf(stderr, "  %-34s %7.3f GB/s %6.3f GB/s %8.3f %6s\n", "io.write sequential",
               tz_w / 1e9, fio_w / 1e9, tz_w / fio_w, ">=0.95");
  std::fprintf(stderr, "  %-34s %7.3f GB/s %6.3f GB/s %8.3f %6s\n",
               "io.write_raw (no CRC, fio's work)", raw_w / 1e9, fio_w / 1e9, raw_w / fio_w,
               ">=1.0");
  std::fprintf(stderr, "  %-34s %7.3f GB/s %6.3f GB/s %8.3f %6s\n",
               "io.read sequential (CRC checked)", tz_r / 1e9, fio_r / 1e9, tz_r / fio_r, ">=0.95");
  std::fprintf(stderr, "  %-34s %7.3f GB/s %6.3f GB/s %8.3f %6s\n",
               "io.read_raw (no CRC, fio's work)", raw_r / 1e9, fio_r / 1e9, raw_r / fio_r,
               ">=1.0");
  // Each tensor byte is read and written once, so the tensor rate is half the bytes moved; it is
  // the figure compared with one direction of fio (the stricter reading of the goal).
  const double tensor_rate = tz_s / 2.0;
  std::fprintf(stderr, "  %-34s %7.3f GB/s %6.3f GB/s %8.3f %6s\n", "io.stream read+touch+write",
               tensor_rate / 1e9, low / 1e9, tensor_rate / low, ">=0.90");
  std::fprintf(stderr,
               "  stream: %zu x %s staging buffers; value = tensor bytes / time (each read and"
               " written once); bytes moved %.3f GB/s\n",
               o.stream_buffers, format_bytes(o.stream_buffer_bytes).c_str(), tz_s / 1e9);
  std::fprintf(stderr,
               "  engine: %zu requests in %zu submit calls, %zu retries, %zu bounce copies\n",
               st.requests, st.submit_calls, st.retries, st.bounce_copies);
  std::fprintf(stderr,
               "  queue: checked engine %.1f requests in flight on average (at most %zu), raw "
               "engine %.1f (at most %zu), of %zu\n",
               st.mean_inflight, st.max_inflight, raw_st.mean_inflight, raw_st.max_inflight,
               o.queue_depth);
  std::fflush(stderr);
  const bool direct = engine.direct_io();
  BenchIoResult r;
  r.bytes = o.size;
  r.direct = direct;
  r.write_Bps = tz_w;
  r.read_Bps = tz_r;
  r.stream_Bps = tensor_rate;
  r.fio_write_Bps = fio_w;
  r.fio_read_Bps = fio_r;
  r.raw_write_Bps = raw_w;
  r.raw_read_Bps = raw_r;
  r.engine_bytes_written = st.bytes_written;
  r.engine_bytes_read = st.bytes_read;
  r.raw_engine_bytes_written = raw_st.bytes_written;
  r.raw_engine_bytes_read = raw_st.bytes_read;
  r.report.emit(result_json("io.write", tz_w, fio_w, o, dir.path(), direct,
                            {{"fio_plain", round_to(median(fw_plain) / 1e9, 4)},
                             {"fio_fixedbufs", round_to(median(fw_fixed) / 1e9, 4)}}));
  r.report.emit(result_json("io.read", tz_r, fio_r, o, dir.path(), direct,
                            {{"fio_plain", round_to(median(fr_plain) / 1e9, 4)},
                             {"fio_fixedbufs", round_to(median(fr_fixed) / 1e9, 4)}}));
  r.report.emit(result_json("io.stream", tensor_rate, low, o, dir.path(), direct,
                            {{"stream_buffers", o.stream_buffers},
                             {"stream_buffer_bytes", o.stream_buffer_bytes},
                             {"moved_GBps", round_to(tz_s / 1e9, 4)}}));
  // The raw lines come last, so the first three keep their places for older readers.
  r.report.emit(
      result_json("io.write_raw", raw_w, fio_w, o, dir.path(), direct,
                  {{"checksums", false}, {"mean_inflight", round_to(raw_st.mean_inflight, 2)}}));
  r.report.emit(
      result_json("io.read_raw", raw_r, fio_r, o, dir.path(), direct,
                  {{"checksums", false}, {"mean_inflight", round_to(raw_st.mean_inflight, 2)}}));
  std::fflush(stdout);
  for (auto& h : tensor) swap.free(h);
  for (auto& e : extents) swap.free(e);
  for (auto& e : raw_extents) raw_swap.free(e);
  for (size_t off = 0; off < o.size; off += size_t{1} << 30) {
    engine.unregister_memory(data.bytes_ptr() + off);
    raw_engine.unregister_memory(data.bytes_ptr() + off);
  }
  return r;
}

}  // namespace tierzero::bench
