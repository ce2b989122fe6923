// Calibration rates for the planner: parsing saved bench output and a quick built-in measurement
// (see calibration.hpp).
#include "tierzero/profile/calibration.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"
#include "tierzero/offload/nvme_engine.hpp"

namespace tierzero::profile {

namespace {

double positive(const nlohmann::json& v, const std::string& what, const std::string& source) {
  TZ_CHECK(v.is_number() && v.get<double>() > 0.0,
           source + ": " + what + " is " + v.dump() + ", not a positive number",
           "rates are positive numbers: GFLOP/s for gemm_gflops, GB/s for the others");
  return v.get<double>();
}

}  // namespace

double compute_seconds(int runs, int cpu_threads, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const double cpu0 = process_cpu_seconds();
    Timer t;
    fn();
    double s = t.seconds();
    const double cpu1 = process_cpu_seconds();
    if (cpu_threads > 0 && cpu0 >= 0.0 && cpu1 >= cpu0)
      s = std::min(s, (cpu1 - cpu0) / cpu_threads);
    best = std::min(best, s);
  }
  return std::max(best, 1e-9);
}

Rates parse_calibration(const std::string& text, const std::string& source) {
  Rates r;
  r.source = source;
  const size_t first = text.find_first_not_of(" \t\r\n");
  TZ_CHECK(first != std::string::npos, source + " holds no rates",
           "give the JSON lines of `tierzero bench ...` or an object of rates");
  // One object spanning the file with no "bench" key: the named-rates form.
  nlohmann::json whole = nlohmann::json::parse(text, nullptr, false);
  if (!whole.is_discarded() && whole.is_object() && !whole.contains("bench")) {
    for (auto it = whole.begin(); it != whole.end(); ++it) {
      const std::string& k = it.key();
      if (k == "gemm_gflops")
        r.gemm_gflops = positive(*it, k, source);
      else if (k == "copy_gbps")
        r.copy_gbps = positive(*it, k, source);
      else if (k == "nvme_read_gbps")
        r.nvme_read_gbps = positive(*it, k, source);
      else if (k == "nvme_write_gbps")
        r.nvme_write_gbps = positive(*it, k, source);
      else if (k == "adam_cpu_gbps")
        r.adam_cpu_gbps = positive(*it, k, source);
      else if (k == "adam_device_gbps")
        r.adam_device_gbps = positive(*it, k, source);
      else if (k == "comm_gbps")
        r.comm_gbps = positive(*it, k, source);
      else
        TZ_THROW(source + ": unknown rate '" + k + "'",
                 "rates are gemm_gflops, copy_gbps, nvme_read_gbps, nvme_write_gbps, "
                 "adam_cpu_gbps, adam_device_gbps, comm_gbps");
    }
    return r;
  }
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  double comm = 0.0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    TZ_CHECK(!j.is_discarded() && j.is_object() && j.contains("bench") && j["bench"].is_string(),
             where + " is not a bench result object",
             "each line is one {\"bench\": ..., \"value\": ...} object as `tierzero bench` prints");
    const std::string name = j["bench"].get<std::string>();
    if (name == "train.step") {
      TZ_CHECK(j.contains("baseline_value"), where + ": train.step has no baseline_value", "");
      r.gemm_gflops = positive(j["baseline_value"], "train.step baseline_value", where);
    } else if (name == "io.read" || name == "io.write" || name == "adam.cpu" ||
               name == "comm.all_gather" || name == "comm.reduce_scatter" || name == "copy.h2d") {
      TZ_CHECK(j.contains("value"), where + ": " + name + " has no value", "");
      const double v = positive(j["value"], name + " value", where);
      if (name == "io.read") r.nvme_read_gbps = v;
      if (name == "io.write") r.nvme_write_gbps = v;
      if (name == "adam.cpu") r.adam_cpu_gbps = v;
      if (name == "copy.h2d") r.copy_gbps = v;
      // Collectives report one line per message size; large messages are what units send, so
      // the best figure per collective counts, and the slower collective bounds the model.
      if (name.rfind("comm.", 0) == 0) comm = comm == 0.0 ? v : std::min(comm, v);
    }
  }
  if (comm > 0.0) r.comm_gbps = comm;
  return r;
}

Rates load_calibration(const std::string& path) {
  // Never blocks on a FIFO; a calibration is a few kilobytes of JSON lines.
  constexpr size_t kMaxBytes = size_t{16} << 20;
  return parse_calibration(
      read_input_file(path, "calibration file",
                      "write one with `tierzero bench train > cal.json` (and io, comm), or omit "
                      "--calibration to measure quickly",
                      kMaxBytes),
      path);
}

Rates measure_rates(Device& device, const std::string& nvme_dir) {
  Rates r;
  r.source = "quick measurement";
  // The CPU backend's kernels are this process's threads: their CPU time counts (see
  // compute_seconds).
  const int cpu_threads = std::max(kernels::cpu::threads(), 1);
  const int compute_threads = device.kind() == DeviceKind::cpu ? cpu_threads : 0;
  DeviceAllocator alloc(device, 0);
  Stream& s = device.default_stream();

  {  // GEMM: 2 n^3 FLOPs
    constexpr size_t n = 1024;
    DeviceBuffer a = alloc.allocate(n * n * sizeof(float), Category::workspace, "cal a");  // (n, n)
    DeviceBuffer b = alloc.allocate(n * n * sizeof(float), Category::workspace, "cal b");  // (n, n)
    DeviceBuffer c = alloc.allocate(n * n * sizeof(float), Category::workspace, "cal c");  // (n, n)
    std::vector<float> host(n * n, 0.5f);                                                  // (n, n)
    device.copy(a.data(), host.data(), host.size() * sizeof(float), CopyKind::host_to_device, s);
    device.copy(b.data(), host.data(), host.size() * sizeof(float), CopyKind::host_to_device, s);
    const double t = compute_seconds(3, compute_threads, [&] {
      device.kernels().matmul_forward(c.f32(), a.f32(), b.f32(), nullptr, n, n, n);
      s.synchronize();
    });
    r.gemm_gflops = 2.0 * n * n * n / t / 1e9;
  }
  {  // host -> device copy
    constexpr size_t bytes = size_t{64} << 20;
    DeviceBuffer d = alloc.allocate(bytes, Category::workspace, "cal copy");
    std::vector<char> host(bytes, 1);
    const double t = compute_seconds(3, 0, [&] {
      device.copy(d.data(), host.data(), bytes, CopyKind::host_to_device, s);
      s.synchronize();
    });
    r.copy_gbps = static_cast<double>(bytes) / t / 1e9;
  }
  {  // CPU AdamW: reads param, m, v, grad (16 B) and writes param, m, v (12 B); bench adam.cpu
     // counts 30 bytes per parameter, and so do we.
    constexpr size_t n = size_t{4} << 20;
    std::vector<float> p(n, 0.1f), m(n, 0.0f), v(n, 0.0f), g(n, 0.01f);  // (n) each
    std::unique_ptr<kernels::Kernels> cpu = kernels::make_cpu_kernels();
    kernels::AdamWParams ap{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
    const double t = compute_seconds(3, cpu_threads, [&] {
      cpu->adamw_update(p.data(), m.data(), v.data(), g.data(), n, ap);
      ++ap.step;
    });
    r.adam_cpu_gbps = 30.0 * static_cast<double>(n) / t / 1e9;
  }
  if (!nvme_dir.empty()) {  // NVMe: 64 MiB write then read through the project's engine
    constexpr size_t bytes = size_t{64} << 20;
    offload::NvmeOptions opt;
    opt.directories = {nvme_dir};
    offload::NvmeEngine engine(opt);
    std::vector<char> buf(bytes, 3);
    offload::Extent ext{1, 0, bytes, bytes};
    engine.reserve(bytes);
    Timer tw;
    engine.write(ext, buf.data()).wait();
    r.nvme_write_gbps = static_cast<double>(bytes) / std::max(tw.seconds(), 1e-9) / 1e9;
    Timer tr;
    engine.read(ext, buf.data()).wait();
    r.nvme_read_gbps = static_cast<double>(bytes) / std::max(tr.seconds(), 1e-9) / 1e9;
  }
  return r;
}

std::string rates_json(const Rates& r) {
  nlohmann::json j = {{"gemm_gflops", r.gemm_gflops},       {"copy_gbps", r.copy_gbps},
                      {"nvme_read_gbps", r.nvme_read_gbps}, {"nvme_write_gbps", r.nvme_write_gbps},
                      {"adam_cpu_gbps", r.adam_cpu_gbps},   {"comm_gbps", r.comm_gbps}};
  if (r.adam_device_gbps > 0) j["adam_device_gbps"] = r.adam_device_gbps;
  return j.dump();
}

}  // namespace tierzero::profile
