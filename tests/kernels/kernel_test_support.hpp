// Shared machinery of the kernel tests: a fixture parameterised by backend ("cpu" always,
// "cuda" when a GPU is usable, skipped with the reason otherwise), device arrays that round-trip
// through Device::copy, seeded random inputs, and the error check every test prints.
//
// The check: each element must satisfy |got - ref| <= tol * (|ref| + rms(ref)), i.e. a relative
// tolerance with an absolute floor at the output's own scale (fp32 rounding of a sum is relative
// to the size of its terms, not to a result that happens to land near zero). Tests print
//   <label>: max_abs A max_rel R (tol T, n N)
// where max_rel is the largest |got - ref| / (|ref| + rms(ref)), the quantity held below tol.
//
// Tolerances are those a careful fp32 implementation meets (fp32 has a unit roundoff of 6e-8):
// 1e-6 for single-rounding element-wise work, 1e-5 where long fp32 sums or a subtraction of
// large logits are involved. Each test states its own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::test {

// Memory of one device holding n elements of T; freed with the array.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(Device& device, size_t n)
      : device_(&device), n_(n), ptr_(static_cast<T*>(device.raw_alloc((n ? n : 1) * sizeof(T)))) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { device_->raw_free(ptr_); }

  T* get() { return ptr_; }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    device_->copy(ptr_, host.data(), host.size() * sizeof(T), CopyKind::host_to_device,
                  device_->default_stream());
    device_->default_stream().synchronize();
  }
  std::vector<T> download() {
    std::vector<T> host(n_);
    device_->copy(host.data(), ptr_, n_ * sizeof(T), CopyKind::device_to_host,
                  device_->default_stream());
    device_->default_stream().synchronize();
    return host;
  }

 private:
  Device* device_;
  size_t n_;
  T* ptr_;  // (n)
};

class KernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;

  Device& device() { return *device_; }
  kernels::Kernels& kernels() { return device_->kernels(); }
  bool is_cpu() const { return GetParam() == "cpu"; }

  // A device array initialised from host data.
  template <typename T>
  std::unique_ptr<DeviceArray<T>> to_device(const std::vector<T>& host) {
    auto array = std::make_unique<DeviceArray<T>>(*device_, host.size());
    array->upload(host);
    return array;
  }
  template <typename T>
  std::unique_ptr<DeviceArray<T>> empty(size_t n) {
    return std::make_unique<DeviceArray<T>>(*device_, n);
  }

 private:
  std::unique_ptr<Device> device_;
};

// Registers every TEST_P of `suite` (a subclass of KernelTest) for the cpu and cuda backends.
#define TZ_INSTANTIATE_BACKENDS(suite)                   \
  INSTANTIATE_TEST_SUITE_P(                              \
      Backends, suite, ::testing::Values("cpu", "cuda"), \
      [](const ::testing::TestParamInfo<std::string>& backend) { return backend.param; })

// Seeded random inputs: fp32 values and the same values widened to double for the reference.
std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f, float mean = 0.0f);
std::vector<float> random_uniform(size_t n, uint32_t seed, float lo, float hi);
std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab);
std::vector<double> widen(const std::vector<float>& x);
std::vector<float> narrow(const std::vector<double>& x);

// Element-wise add for building "+=" expectations: result = base + delta.
std::vector<double> plus(const std::vector<float>& base, const std::vector<double>& delta);

// |x| element-wise, for the magnitude of a product (the reference on absolute values), and the
// rms of such magnitudes: the scale of an fp32 dot product's rounding, which a result near zero by
// cancellation does not have (see test_matmul.cpp).
std::vector<double> absolute(std::vector<double> x);
double rms(const std::vector<double>& x);
// Whether a and b hold the same bits (NaN payloads and zero signs included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

// Values rounded to a 16-bit type on the host (core/dtype_bits.hpp, as every backend rounds):
// the bits a 16-bit kernel reads and the values they hold.
struct Rounded {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Rounded rounded(const std::vector<float>& x, DType type);
// n results of `type` read from the floats of a device array they were written into (a 16-bit
// result fills the first 2n bytes).
std::vector<float> result_values(const std::vector<float>& raw, DType type, size_t n);
// n floats that are NaN as fp32 and, in each half, as bf16 and fp16: what a result that must be
// overwritten starts as, whatever its type.
std::vector<float> poison(size_t n);

// Checks got against ref as described at the top of this file, prints the errors and records
// them as test properties; a failure names the worst element. `abs_floor` replaces rms(ref) as the
// absolute floor where an output's small elements must be right in relative terms too (softmax
// probabilities); a negative abs_floor means rms(ref).
void expect_close(const std::string& label, const std::vector<float>& got,
                  const std::vector<double>& ref, double tol, double abs_floor = -1.0);

}  // namespace tierzero::test
