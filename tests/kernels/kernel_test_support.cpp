// Implementation of the kernel-test helpers (kernel_test_support.hpp).
#include "kernel_test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace tierzero::test {

void KernelTest::SetUp() {
  if (GetParam() == "cuda") {
    std::string reason;
    if (cuda_device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  }
  device_ = make_device(GetParam());
}

std::vector<float> random_normal(size_t n, uint32_t seed, float stddev, float mean) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> random_uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> x(n);
  for (int32_t& v : x) v = dist(rng);
  return x;
}

std::vector<double> widen(const std::vector<float>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<double>(x[i]);
  return y;
}

std::vector<float> narrow(const std::vector<double>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i]);
  return y;
}

std::vector<double> plus(const std::vector<float>& base, const std::vector<double>& delta) {
  std::vector<double> y(base.size());
  for (size_t i = 0; i < base.size(); ++i) y[i] = static_cast<double>(base[i]) + delta[i];
  return y;
}

void expect_close(const std::string& label, const std::vector<float>& got,
                  const std::vector<double>& ref, double tol, double abs_floor_arg) {
  ASSERT_EQ(got.size(), ref.size()) << label;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double sum_sq = 0.0;
  for (double r : ref) sum_sq += r * r;
  const double rms = ref.empty() ? 0.0 : std::sqrt(sum_sq / static_cast<double>(ref.size()));
  const double abs_floor = abs_floor_arg >= 0.0 ? abs_floor_arg : rms;
  double max_abs = 0.0;
  double max_rel = 0.0;
  size_t worst = 0;
  bool finite = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g)) finite = false;
    const double diff = std::fabs(g - ref[i]);
    const double scale = std::fabs(ref[i]) + abs_floor;
    const double rel = scale > 0.0 ? diff / scale : (diff > 0.0 ? kInf : 0.0);
    max_abs = std::max(max_abs, diff);
    if (rel > max_rel || !std::isfinite(g)) {
      max_rel = std::isfinite(g) ? rel : kInf;
      worst = i;
    }
  }
  std::printf("%s: max_abs %.1e max_rel %.1e (tol %.0e, n %zu)\n", label.c_str(), max_abs, max_rel,
              tol, ref.size());
  std::fflush(stdout);
  ::testing::Test::RecordProperty(label + ".max_abs", std::to_string(max_abs));
  ::testing::Test::RecordProperty(label + ".max_rel", std::to_string(max_rel));
  EXPECT_TRUE(finite) << label << ": non-finite output at element " << worst;
  EXPECT_LE(max_rel, tol) << label << ": worst element " << worst << " got "
                          << (ref.empty() ? 0.0 : static_cast<double>(got[worst])) << " expected "
                          << (ref.empty() ? 0.0 : ref[worst]) << " (absolute floor " << abs_floor
                          << ")";
}

std::vector<double> absolute(std::vector<double> x) {
  for (double& v : x) v = std::fabs(v);
  return x;
}

double rms(const std::vector<double>& x) {
  double sum_sq = 0.0;
  for (double v : x) sum_sq += v * v;
  return std::sqrt(sum_sq / static_cast<double>(x.empty() ? 1 : x.size()));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp's pointers must not be null, even for no bytes: an empty vector's data() may be.)
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

Rounded rounded(const std::vector<float>& x, DType type) {
  Rounded r{std::vector<uint16_t>(x.size()), std::vector<float>(x.size())};
  convert_from_f32(r.bits.data(), type, x.data(), x.size());
  convert_to_f32(r.values.data(), r.bits.data(), type, x.size());
  return r;
}

std::vector<float> result_values(const std::vector<float>& raw, DType type, size_t n) {
  if (type == DType::f32) return std::vector<float>(raw.begin(), raw.begin() + n);
  std::vector<float> out(n);
  convert_to_f32(out.data(), raw.data(), type, n);
  return out;
}

std::vector<float> poison(size_t n) {
  const uint32_t bits = 0x7fc07fc0u;
  float nan;
  std::memcpy(&nan, &bits, sizeof nan);
  return std::vector<float>(n, nan);
}

}  // namespace tierzero::test
