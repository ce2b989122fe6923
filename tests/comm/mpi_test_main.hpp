// Shared by the multi-rank GoogleTest programs: the MPI session every test uses, and helpers
// that make per-rank test data reproducible on every rank, so each rank can compute the whole
// reference locally (one rank, fp32) and compare with what the collective delivered.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/dtype.hpp"

namespace tierzero::comm::test {

MpiSession& session();  // created by main() before any test runs

// A value in [-1, 1) that depends only on (rank, index, salt), already rounded to `dtype`, so
// that a reference built from it equals what that rank sent.
inline float test_value(int rank, size_t index, uint32_t salt, DType dtype) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^
               (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(salt) << 20);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  const float v =
      static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24)) * 2.0f -
      1.0f;
  if (dtype == DType::bf16) return to_float(to_bf16(v));
  if (dtype == DType::f16) return to_float(to_f16(v));
  return v;
}

// A buffer of `dtype` elements holding floats (converted on the way in and out).
class TypedBuffer {
 public:
  TypedBuffer(DType dtype, size_t count)
      : dtype_(dtype), bytes_(count * dtype_size(dtype) + 1), count_(count) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t count() const { return count_; }
  void set(const std::vector<float>& values) {
    convert_from_f32(bytes_.data(), dtype_, values.data(), values.size());
  }
  std::vector<float> get() const {
    std::vector<float> out(count_);  // (count)
    convert_to_f32(out.data(), bytes_.data(), dtype_, count_);
    return out;
  }

 private:
  DType dtype_;
  std::vector<unsigned char> bytes_;  // (count * dtype_size + 1): never empty, so data() != null
  size_t count_;
};

// Rounds a float reference to what `dtype` can hold.
inline float round_to(float v, DType dtype) {
  if (dtype == DType::bf16) return to_float(to_bf16(v));
  if (dtype == DType::f16) return to_float(to_f16(v));
  return v;
}

// Largest errors seen by a test, printed at its end.
struct ErrorStats {
  double max_abs = 0.0;
  double max_rel = 0.0;
  double first_rel = 0.0;  // of the first value: before any training step amplifies a difference
  size_t worst_at = 0;     // the value (in compare order) with the largest relative error
  size_t compared = 0;
  size_t bad = 0;
  void compare(float got, float want, double atol, double rtol) {
    const double w = static_cast<double>(want);
    const double abs_err = std::fabs(static_cast<double>(got) - w);
    const double rel = w != 0.0 ? abs_err / std::fabs(w) : 0.0;
    if (compared == 0) first_rel = rel;
    if (!(abs_err <= max_abs)) max_abs = abs_err;  // also records a NaN
    if (rel > max_rel) {
      max_rel = rel;
      worst_at = compared;
    }
    if (!(abs_err <= atol + rtol * std::fabs(w))) ++bad;  // NaN counts as bad
    ++compared;
  }
  void print(const std::string& what, int rank) const {
    std::printf(
        "[rank %d] %s: %zu values, max abs err %.3g, max rel err %.3g (value %zu), first value's "
        "rel err %.3g\n",
        rank, what.c_str(), compared, max_abs, max_rel, worst_at, first_rel);
  }
};

// The tolerance a reduced value of `dtype` may differ from the fp32 reference by: fp32 sums in a
// different order, then one rounding to the storage type.
inline double rtol_for(DType dtype) {
  if (dtype == DType::bf16) return 1.0 / 128.0;  // 1 ulp of bf16 (8 bits of mantissa)
  if (dtype == DType::f16) return 1.0 / 1024.0;  // 1 ulp of fp16
  return 1e-5;
}

}  // namespace tierzero::comm::test
