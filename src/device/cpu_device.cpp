// The CPU device: host memory from aligned_alloc, in-order "streams", always-complete events.
// It lets every layer above run the same code on a machine without a GPU, which is also how the
// fp32 reference path runs.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {

namespace {

class CpuStream final : public Stream {
 public:
  void synchronize() override {}
  void* native() override { return nullptr; }
};

class CpuEvent final : public Event {
 public:
  void record(Stream&) override { time_ = std::chrono::steady_clock::now(); }
  bool query() override { return true; }
  void synchronize() override {}
  void make_wait(Stream&) override {}
  double elapsed_ms_since(Event& start) override {
    auto& s = dynamic_cast<CpuEvent&>(start);
    return std::chrono::duration<double, std::milli>(time_ - s.time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_ = std::chrono::steady_clock::now();
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : kernels_(kernels::make_cpu_kernels()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  int index() const override { return 0; }
  std::string name() const override {
    return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
  }
  size_t total_memory() const override {
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  }

  void* raw_alloc(size_t bytes) override {
    constexpr size_t kAlign = 4096;  // page-aligned: O_DIRECT-capable and SIMD-friendly
    size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (!p)
      TZ_THROW("cpu device: allocation of " + std::to_string(bytes) + " bytes failed",
               "the machine is out of memory; lower the batch size or offload more");
    return p;
  }
  void raw_free(void* ptr) override { std::free(ptr); }

  void register_host(void*, size_t) override {}
  void unregister_host(void*) override {}

  void copy(void* dst, const void* src, size_t bytes, CopyKind, Stream&) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* dst, size_t bytes, Stream&) override {
    if (bytes) std::memset(dst, 0, bytes);
  }

  Stream& default_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  kernels::Kernels& kernels() override { return *kernels_; }

 private:
  CpuStream stream_;
  std::unique_ptr<kernels::Kernels> kernels_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  return std::make_unique<CpuDevice>(threads);
}

std::unique_ptr<Device> make_device(const std::string& spec, int cpu_threads) {
  if (spec == "cpu") return make_cpu_device(cpu_threads);
  if (spec == "cuda") return make_cuda_device(0);
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string idx = spec.substr(5);
    char* end = nullptr;
    long i = std::strtol(idx.c_str(), &end, 10);
    if (!idx.empty() && end && *end == '\0' && i >= 0) return make_cuda_device(static_cast<int>(i));
  }
  TZ_THROW("unknown device '" + spec + "'", "use cpu, cuda or cuda:N");
}

}  // namespace tierzero
