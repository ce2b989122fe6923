// `tierzero bench adam`: the CPU AdamW step with its bf16 working copy, on 256M parameters by
// default, against a STREAM triad (a = b + s*c) run in the same process with the same threads.
// AdamW on host shards is bound by memory bandwidth, so the triad's rate is its ceiling.
//
// Bytes are counted as STREAM counts them, what the code asks for and not what the memory bus
// carries: AdamW reads param, grad, m, v (16 bytes) and writes param, m, v (12) and the bf16 copy
// (2): 30 bytes per parameter. Triad reads b, c and writes a: 12 bytes per element. Neither
// counts write-allocate reads (a cache line is read before it is written): triad's a costs one
// (16 bytes move per element, 12 counted), AdamW's bf16 copy one (32 move, 30 counted), because
// its other writes land on lines it has just read. The triad figure is therefore the more
// understated of the two, which is STREAM's convention; the table says so next to the ratio.
//
// Both loops run one contiguous block per OpenMP thread, cut as the AdamW kernel cuts them, and
// each thread first touches its own block, so pages sit where the thread that uses them runs.
// Steps and triads alternate (warm-up first) so that load from other processes falls on both;
// each figure is the median. Afterwards a spread of elements is recomputed by the scalar path
// from saved inputs and must match bit for bit, so a broken kernel cannot report a rate.
//
// The peer: PyTorch's fused CPU AdamW (adam_torch_peer.hpp) moves 28 bytes per parameter, so it
// is compared with our update without the bf16 copy (adamw_update, also 28), which each round
// runs too, on the same state, before the step with the copy. The peer's step runs in its own
// process, between ours, with as many threads; its time is taken there around opt.step().
#include "tierzero/bench/adam.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "adam_torch_peer.hpp"
#include "child_runs.hpp"
#include "tierzero/bench/results.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::bench {

namespace {

constexpr double kAdamBytes = 30.0;   // per parameter, as counted above
constexpr double kTriadBytes = 12.0;  // per element, as STREAM counts it
constexpr float kTriadScalar = 3.0f;

// Thread t's elements [begin, end) of n: the AdamW kernel's split (kernels/cpu/adamw.cpp), one
// contiguous block per thread cut at multiples of 16 elements.
struct Range {
  size_t begin, end;
};
Range thread_block(size_t n) {
  constexpr size_t kLine = 16;
  const auto threads = static_cast<size_t>(omp_get_num_threads());
  const auto t = static_cast<size_t>(omp_get_thread_num());
  const size_t block = (n + threads - 1) / threads;
  const size_t block_lines = (block + kLine - 1) / kLine * kLine;
  const size_t begin = std::min(n, t * block_lines);
  return {begin, std::min(n, begin + block_lines)};
}

// A value in [lo, hi) from the element index: deterministic, cheap, and the same whichever
// thread writes it.
float hashed(size_t i, uint64_t stream, float lo, float hi) {
  uint64_t z = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float unit = static_cast<float>(z >> 40) * 0x1.0p-24f;  // [0, 1)
  return lo + (hi - lo) * unit;
}

struct AdamState {
  float grad, param, m, v;
};
AdamState initial(size_t i) {
  // A mid-training state: params O(1), small gradients, v of the order of g^2.
  const float g = hashed(i, 1, -1e-2f, 1e-2f);
  return {g, hashed(i, 2, -1.0f, 1.0f), hashed(i, 3, -1e-3f, 1e-3f), hashed(i, 4, 0.0f, 1e-4f)};
}

void triad(float* a, const float* b, const float* c, size_t n) {  // a, b, c (n)
#pragma omp parallel
  {
    const Range r = thread_block(n);
#pragma omp simd
    for (size_t i = r.begin; i < r.end; ++i) a[i] = b[i] + kTriadScalar * c[i];
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

BenchAdamResult bench_adam(const BenchAdamOptions& o) {
  const size_t n = o.params;
  std::unique_ptr<Device> dev = make_device("cpu", o.threads);
  DeviceAllocator alloc(*dev, 0);
  DeviceBuffer param_buf = alloc.allocate(n * 4, Category::param, "bench adam param");  // (n)
  DeviceBuffer m_buf = alloc.allocate(n * 4, Category::optimizer, "bench adam m");      // (n)
  DeviceBuffer v_buf = alloc.allocate(n * 4, Category::optimizer, "bench adam v");      // (n)
  DeviceBuffer grad_buf = alloc.allocate(n * 4, Category::grad, "bench adam grad");     // (n)
  DeviceBuffer out_buf = alloc.allocate(n * 2, Category::param, "bench adam bf16");     // (n)
  DeviceBuffer a_buf = alloc.allocate(n * 4, Category::workspace, "bench triad a");     // (n)
  DeviceBuffer b_buf = alloc.allocate(n * 4, Category::workspace, "bench triad b");     // (n)
  DeviceBuffer c_buf = alloc.allocate(n * 4, Category::workspace, "bench triad c");     // (n)
  float* param = param_buf.f32();                                                       // (n)
  float* m = m_buf.f32();                                                               // (n)
  float* v = v_buf.f32();                                                               // (n)
  float* grad = grad_buf.f32();                                                         // (n)
  auto* out = static_cast<uint16_t*>(out_buf.data());  // (n) bf16 bits
  float* a = a_buf.f32();                              // (n)
  float* b = b_buf.f32();                              // (n)
  float* c = c_buf.f32();                              // (n)

  // First touch, by the thread that will use each block.
#pragma omp parallel
  {
    const Range r = thread_block(n);
    for (size_t i = r.begin; i < r.end; ++i) {
      const AdamState s = initial(i);
      grad[i] = s.grad;
      param[i] = s.param;
      m[i] = s.m;
      v[i] = s.v;
      out[i] = 0;
      a[i] = 0.0f;
      b[i] = hashed(i, 5, -1.0f, 1.0f);
      c[i] = hashed(i, 6, -1.0f, 1.0f);
    }
  }

  kernels::AdamWParams p{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
  std::unique_ptr<TempDir> peer_dir;
  std::unique_ptr<TorchAdamWPeer> peer;
  if (o.peer != "none") {
    peer_dir = std::make_unique<TempDir>(bench_base_dir(""));
    peer = std::make_unique<TorchAdamWPeer>(o.python, n, omp_get_max_threads(), p,
                                            peer_dir->path() + "/torch_adamw.log");
    TZ_CHECK(peer->available() || o.peer != "torch",
             "bench adam: the torch peer cannot run: " + peer->why_not(),
             "install PyTorch for " + o.python + " (pip install torch), or pass --peer auto|none");
  }
  const bool with_peer = peer != nullptr && peer->available();

  std::vector<double> adam_s, fp32_s, triad_s, peer_s;
  for (int k = 0; k <= o.repeats; ++k) {  // k = 0 warms up and is not counted
    Timer tt;
    triad(a, b, c, n);
    const double t_triad = tt.seconds();
    Timer tf;
    kernels::cpu::adamw_update(param, m, v, grad, n, p);
    const double t_fp32 = tf.seconds();
    ++p.step;
    const double t_peer = with_peer ? peer->step_seconds() : 0.0;
    Timer ta;
    kernels::cpu::adamw_update_with_copy(param, m, v, grad, out, n, p);
    const double t_adam = ta.seconds();
    ++p.step;
    if (k > 0) {
      triad_s.push_back(t_triad);
      adam_s.push_back(t_adam);
      fp32_s.push_back(t_fp32);
      peer_s.push_back(t_peer);
    }
  }
  const auto steps = 2 * (static_cast<int64_t>(o.repeats) + 1);  // each round: fp32, then copy
  const bool peer_checked = !with_peer || peer->check();

  // Spot check: 4099 elements spread over the array, plus the ends of every thread's block, run
  // again through the scalar path from their initial state for the same steps.
  std::vector<size_t> sample;  // indices into (n)
  for (size_t j = 0; j < 4099; ++j) sample.push_back(j * (n / 4099));
#pragma omp parallel
  {
    const Range r = thread_block(n);
#pragma omp critical
    if (r.begin < r.end) {
      sample.push_back(r.begin);
      sample.push_back(r.end - 1);
    }
  }
  size_t bad = 0;
  double max_rel_triad = 0.0;
  for (size_t i : sample) {
    AdamState s = initial(i);
    uint16_t copy = 0;
    kernels::AdamWParams q = p;
    for (int64_t k = 0; k < steps; ++k) {  // even k: the fp32 step (its copy is overwritten)
      q.step = 1 + k;
      kernels::cpu::adamw_update_with_copy_on(kernels::cpu::CpuIsa::scalar, &s.param, &s.m, &s.v,
                                              &s.grad, &copy, 1, q);
    }
    if (bits(s.param) != bits(param[i]) || bits(s.m) != bits(m[i]) || bits(s.v) != bits(v[i]) ||
        copy != out[i] || out[i] != float_to_bf16_bits(param[i])) {
      if (++bad <= 5)
        std::fprintf(stderr, "  check failed at %zu: param %.9g (scalar %.9g), bf16 0x%04x\n", i,
                     static_cast<double>(param[i]), static_cast<double>(s.param), out[i]);
    }
    const double want = static_cast<double>(b[i]) + 3.0 * static_cast<double>(c[i]);
    max_rel_triad = std::max(max_rel_triad,
                             std::fabs(static_cast<double>(a[i]) - want) / (std::fabs(want) + 1.0));
  }
  if (max_rel_triad > 1e-6) ++bad;

  const double t_adam = median(adam_s), t_triad = median(triad_s);
  const double nd = static_cast<double>(n);
  const double adam_gbps = kAdamBytes * nd / t_adam / 1e9;
  const double triad_gbps = kTriadBytes * nd / t_triad / 1e9;
  const double ratio = adam_gbps / triad_gbps;
  const char* isa = kernels::cpu::adamw_isa();
  std::fprintf(stderr, "bench adam: AdamW + bf16 copy, %zu params (%.2f GiB of state), %s, %s\n", n,
               18.0 * nd / (1024.0 * 1024.0 * 1024.0), isa, dev->name().c_str());
  std::fprintf(stderr, "  %-40s %12s %12s\n", "measure", "median", "GB/s");
  std::fprintf(stderr, "  %-40s %9.2f ms %9.2f\n", "triad a = b + 3c (12 B/elem, STREAM)",
               t_triad * 1e3, triad_gbps);
  std::fprintf(stderr, "  %-40s %9.2f ms %9.2f\n", "adamw step + bf16 copy (30 B/param)",
               t_adam * 1e3, adam_gbps);
  std::fprintf(stderr, "  %-40s %9.3f Gparam/s\n", "adamw rate", nd / t_adam / 1e9);
  std::fprintf(stderr, "  %-40s %9.3f (goal >= 0.90)\n", "ratio adamw / triad", ratio);
  std::fprintf(stderr,
               "  counted as STREAM does (no write-allocate): with it triad moves 16 B/elem\n"
               "  (%.2f GB/s) and adamw 32 B/param (%.2f GB/s)\n",
               16.0 * nd / t_triad / 1e9, 32.0 * nd / t_adam / 1e9);
  const double t_fp32 = median(fp32_s), t_peer = median(peer_s);
  std::fprintf(stderr, "  %-40s %9.2f ms %9.2f\n", "adamw step, fp32 only (28 B/param)",
               t_fp32 * 1e3, 28.0 * nd / t_fp32 / 1e9);
  if (with_peer) {
    std::fprintf(stderr, "  %-40s %9.2f ms %9.2f\n", "torch fused AdamW (28 B/param)", t_peer * 1e3,
                 28.0 * nd / t_peer / 1e9);
    std::fprintf(stderr, "  %-40s %9.3f (%s; goal >= 1.0)\n", "ratio torch time / ours (fp32)",
                 t_peer / t_fp32, peer->version().c_str());
  } else if (peer != nullptr) {
    std::fprintf(stderr, "  torch fused AdamW: not measured (%s)\n", peer->why_not().c_str());
  }
  for (size_t r = 0; r < adam_s.size(); ++r) {
    std::fprintf(stderr, "  repeat %zu: triad %.2f ms, adamw %.2f ms, fp32 %.2f ms", r + 1,
                 triad_s[r] * 1e3, adam_s[r] * 1e3, fp32_s[r] * 1e3);
    if (with_peer) std::fprintf(stderr, ", torch %.2f ms", peer_s[r] * 1e3);
    std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr, "  check: %zu elements vs the scalar path, bitwise: %s\n", sample.size(),
               bad == 0 ? "ok" : "FAILED");
  if (with_peer)
    std::fprintf(stderr, "  check: torch's parameters finite and changed: %s\n",
                 peer_checked ? "ok" : "FAILED");
  std::fflush(stderr);
  nlohmann::ordered_json j = bench_result("adam.cpu", round_to(adam_gbps, 3), "GB/s", "triad",
                                          round_to(triad_gbps, 3), ratio);
  j["isa"] = isa;
  j["threads"] = omp_get_max_threads();
  j["params"] = n;
  j["step_ms"] = round_to(t_adam * 1e3, 2);
  j["triad_ms"] = round_to(t_triad * 1e3, 2);
  j["gparams_per_s"] = round_to(nd / t_adam / 1e9, 4);
  j["bytes_per_param"] = 30;
  j["triad_bytes_per_elem"] = 12;
  j["adam_moved_GBps"] = round_to(32.0 * nd / t_adam / 1e9, 3);
  j["triad_moved_GBps"] = round_to(16.0 * nd / t_triad / 1e9, 3);
  j["checked"] = bad == 0;
  BenchAdamResult r;
  r.params = n;
  r.threads = omp_get_max_threads();
  r.isa = isa;
  r.step_s = t_adam;
  r.triad_s = t_triad;
  r.adam_gbps = adam_gbps;
  r.triad_gbps = triad_gbps;
  r.checked_elements = sample.size();
  r.fp32_step_s = t_fp32;
  r.report.passed = bad == 0 && peer_checked;
  r.report.emit(j);
  if (with_peer) {
    r.peer_step_s = t_peer;
    r.peer = peer->version() + " fused AdamW";
    nlohmann::ordered_json t =
        bench_result("adam.cpu_vs_torch", round_to(nd / t_fp32 / 1e9, 4), "Gparam/s",
                     "torch_fused_adamw", round_to(nd / t_peer / 1e9, 4), t_peer / t_fp32);
    t["peer"] = r.peer;
    t["isa"] = isa;
    t["threads"] = omp_get_max_threads();
    t["params"] = n;
    t["step_ms"] = round_to(t_fp32 * 1e3, 2);
    t["peer_step_ms"] = round_to(t_peer * 1e3, 2);
    t["bytes_per_param"] = 28;
    t["checked"] = bad == 0 && peer_checked;
    r.report.emit(t);
  }
  return r;
}

}  // namespace tierzero::bench
