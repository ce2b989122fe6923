// The CPU AdamW's instruction-set paths (scalar, AVX2, AVX-512): each against a double-precision
// PyTorch AdamW, against each other bit for bit (odd lengths, unaligned pointers, several
// threads), and its bf16 working copy against core's float_to_bf16_bits. A path this CPU cannot
// run is skipped with the reason. The backend-level AdamW test (test_adamw.cpp) covers the
// dispatched entry point on every backend; this file covers what lies under it on the CPU.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/dtype_bits.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::test {
namespace {

using kernels::AdamWParams;
using kernels::cpu::CpuIsa;

constexpr CpuIsa kPaths[] = {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512};

using dtype_bits::bits_float;
using dtype_bits::float_bits;

// One optimizer state of n elements, stored `offset` floats past the start of its vectors so that
// the paths also see unaligned pointers. Every 31st gradient is zero (m = v = 0 later, where eps
// alone keeps the step finite) and every 37th tiny (sqrt(v_hat) comparable to eps); `extremes`
// adds gradients whose v is subnormal and params near the ends of the fp32 range, for the bitwise
// comparisons (a relative-error check against double has nothing to say about those).
struct State {
  State(size_t n, size_t offset, uint32_t seed, bool extremes = true)
      : n_(n),
        offset_(offset),
        param_(n + offset),
        m_(n + offset),
        v_(n + offset),
        grad_(n + offset),
        out_(n + offset, 0) {
    const std::vector<float> p0 = random_normal(n, seed);
    const std::vector<float> m0 = random_normal(n, seed + 1, 0.1f);
    const std::vector<float> g0 = random_normal(n, seed + 2);
    for (size_t i = 0; i < n; ++i) {
      param_[offset + i] = p0[i];
      m_[offset + i] = m0[i];
      v_[offset + i] = m0[i] * m0[i] * 0.5f;  // v >= 0, comparable to m^2
      grad_[offset + i] = g0[i];
    }
    for (size_t i = 0; i < n; i += 31) grad_[offset + i] = 0.0f;
    for (size_t i = 3; i < n; i += 37) grad_[offset + i] *= 1e-7f;
    if (!extremes) return;
    for (size_t i = 5; i < n; i += 41) grad_[offset + i] *= 1e-20f;
    for (size_t i = 9; i < n; i += 43) param_[offset + i] *= 1e30f;
    for (size_t i = 7; i < n; i += 47) param_[offset + i] *= 1e-38f;
  }
  float* param() { return param_.data() + offset_; }  // (n)
  float* m() { return m_.data() + offset_; }          // (n)
  float* v() { return v_.data() + offset_; }          // (n)
  float* grad() { return grad_.data() + offset_; }    // (n)
  uint16_t* out() { return out_.data() + offset_; }   // (n)
  size_t n() const { return n_; }

  size_t n_, offset_;
  std::vector<float> param_, m_, v_, grad_;  // (offset + n) each
  std::vector<uint16_t> out_;                // (offset + n)
};

const AdamWParams kGpt2{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 1};

void run_steps(CpuIsa isa, State& s, AdamWParams p, int steps) {
  for (int k = 0; k < steps; ++k) {
    kernels::cpu::adamw_update_with_copy_on(isa, s.param(), s.m(), s.v(), s.grad(), s.out(), s.n(),
                                            p);
    ++p.step;
  }
}

// Index of the first element where two float arrays differ in bits, or n.
size_t first_bit_difference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (float_bits(a[i]) != float_bits(b[i])) return i;
  return n;
}

class AdamWCpuPath : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::cpu_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU cannot run the " << kernels::cpu::cpu_isa_name(GetParam())
                   << " path";
  }
};

INSTANTIATE_TEST_SUITE_P(Paths, AdamWCpuPath, ::testing::ValuesIn(kPaths),
                         [](const ::testing::TestParamInfo<CpuIsa>& path) {
                           return std::string(kernels::cpu::cpu_isa_name(path.param));
                         });

TEST_P(AdamWCpuPath, MatchesDoubleReference) {
  struct Case {
    const char* label;
    AdamWParams params;
    int steps;
  };
  const Case cases[] = {
      {"gpt2", kGpt2, 5},
      {"late no decay", {3e-3f, 0.9f, 0.999f, 1e-6f, 0.0f, 1.0f, 1000}, 3},
      {"strong decay, scaled grads", {1e-3f, 0.8f, 0.99f, 1e-8f, 0.5f, 0.125f, 2}, 4},
  };
  const size_t n = 100003;
  for (const Case& c : cases) {
    State s(n, 1, 4242, false);
    std::vector<double> param_ref(s.param(), s.param() + n), m_ref(s.m(), s.m() + n),
        v_ref(s.v(), s.v() + n), grad_ref(s.grad(), s.grad() + n);
    run_steps(GetParam(), s, c.params, c.steps);
    for (int k = 0; k < c.steps; ++k) {
      const ref::AdamW rp{static_cast<double>(c.params.lr),
                          static_cast<double>(c.params.beta1),
                          static_cast<double>(c.params.beta2),
                          static_cast<double>(c.params.eps),
                          static_cast<double>(c.params.weight_decay),
                          static_cast<double>(c.params.grad_scale),
                          c.params.step + k};
      ref::adamw_update(param_ref.data(), m_ref.data(), v_ref.data(), grad_ref.data(), n, rp);
    }
    const std::string label = std::string(kernels::cpu::cpu_isa_name(GetParam())) + " " + c.label +
                              " after " + std::to_string(c.steps) + " steps";
    expect_close(label + " param", std::vector<float>(s.param(), s.param() + n), param_ref, 1e-6);
    expect_close(label + " m", std::vector<float>(s.m(), s.m() + n), m_ref, 1e-6);
    expect_close(label + " v", std::vector<float>(s.v(), s.v() + n), v_ref, 1e-6);
  }
}

// Every path against the scalar one, bit for bit: param, m, v and the bf16 copy. Lengths around
// the vector widths (8, 16) and a large odd one that several threads split; offsets make the
// pointers unaligned (and differently so for the two runs).
TEST_P(AdamWCpuPath, BitwiseEqualToScalarPath) {
  const size_t lengths[] = {1, 7, 8, 15, 16, 17, 31, 33, 1000, 1000003};
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);  // an odd split, whatever the machine
  for (size_t n : lengths) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
      State scalar(n, 0, 99);
      State path(n, offset, 99);
      run_steps(CpuIsa::scalar, scalar, kGpt2, 3);
      run_steps(GetParam(), path, kGpt2, 3);
      const std::string where = std::string(kernels::cpu::cpu_isa_name(GetParam())) +
                                " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
      EXPECT_EQ(first_bit_difference(scalar.param(), path.param(), n), n) << where << " param";
      EXPECT_EQ(first_bit_difference(scalar.m(), path.m(), n), n) << where << " m";
      EXPECT_EQ(first_bit_difference(scalar.v(), path.v(), n), n) << where << " v";
      EXPECT_EQ(std::memcmp(scalar.out(), path.out(), n * sizeof(uint16_t)), 0)
          << where << " bf16 copy";
    }
  }
  omp_set_num_threads(saved_threads);
  std::printf("%s: bitwise equal to the scalar path for %zu lengths x 3 offsets\n",
              kernels::cpu::cpu_isa_name(GetParam()), std::size(lengths));
}

// The bf16 copy is core's conversion of the updated param, bit for bit, for random values and for
// the cases rounding gets wrong: ties either way, a carry into the exponent, overflow to inf,
// infinities, NaNs (quiet and signalling, both signs), zeros and subnormals. With lr = 0 the
// update leaves param unchanged, so these patterns reach the rounding as they are.
TEST_P(AdamWCpuPath, Bf16CopyIsCoreConversion) {
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f80ffffu, 0x3fff8000u,
                               0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0xff800000u,
                               0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff80ffffu, 0x7fbfffffu,
                               0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u,
                               0x807fffffu, 0x80008000u, 0xbf808000u, 0xc0018000u};
  const size_t n = std::size(patterns) + 1000;
  for (bool lr_zero : {true, false}) {
    State s(n, 1, 7);
    if (lr_zero)
      for (size_t i = 0; i < std::size(patterns); ++i) s.param()[i] = bits_float(patterns[i]);
    AdamWParams p = kGpt2;
    if (lr_zero) p.lr = 0.0f;
    kernels::cpu::adamw_update_with_copy_on(GetParam(), s.param(), s.m(), s.v(), s.grad(), s.out(),
                                            n, p);
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = float_to_bf16_bits(s.param()[i]);
      if (s.out()[i] != want && ++mismatches <= 5)
        ADD_FAILURE() << "element " << i << ": param bits 0x" << std::hex
                      << float_bits(s.param()[i]) << " copy 0x" << s.out()[i] << " core 0x" << want
                      << std::dec;
    }
    EXPECT_EQ(mismatches, 0u);
    if (lr_zero) {  // NaNs come back quieted (x * 1 sets the quiet bit); the rest unchanged
      for (size_t i = 0; i < std::size(patterns); ++i) {
        if (!std::isnan(s.param()[i])) {
          EXPECT_EQ(float_bits(s.param()[i]), patterns[i]) << "lr = 0 changed param " << i;
        }
      }
    }
  }
}

// weight_decay and grad_scale each change the result by the amount PyTorch's formula says: one
// step from zero state, where m_hat = g and v_hat = g^2, so the Adam part is lr * g / (|g| + eps).
// The expectations use the fp32 hyperparameters widened, as PyTorch does with a float beta.
TEST_P(AdamWCpuPath, HonoursWeightDecayAndGradScale) {
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  const double param0 = 2.0, grad0 = 0.5;  // exact in fp32
  auto one_step = [&](float weight_decay, float grad_scale) {
    float param = static_cast<float>(param0), m = 0.0f, v = 0.0f, grad = static_cast<float>(grad0);
    const AdamWParams p{lr, beta1, beta2, eps, weight_decay, grad_scale, 1};
    kernels::cpu::adamw_update_with_copy_on(GetParam(), &param, &m, &v, &grad, nullptr, 1, p);
    return std::vector<double>{param, m, v};
  };
  auto expect = [](const char* what, double got, double want) {
    const double rel = std::fabs(got - want) / std::fabs(want);
    std::printf("  %s: got %.9g want %.9g (rel %.2e)\n", what, got, want, rel);
    EXPECT_LE(rel, 1e-6) << what;
  };
  const double lr_d = lr, b1 = beta1, b2 = beta2, eps_d = eps;
  for (double wd : {0.0, 0.1, 0.5}) {
    for (double gs : {1.0, 0.25, 3.0}) {
      const auto got = one_step(static_cast<float>(wd), static_cast<float>(gs));
      const double g = grad0 * gs;
      const double param = param0 * (1.0 - lr_d * wd) - lr_d * g / (std::fabs(g) + eps_d);
      const std::string at = "wd=" + std::to_string(wd) + " gs=" + std::to_string(gs);
      expect((at + " param").c_str(), got[0], param);
      expect((at + " m").c_str(), got[1], (1.0 - b1) * g);
      expect((at + " v").c_str(), got[2], (1.0 - b2) * g * g);
    }
  }
  // And they matter: decay moves param by lr * wd * p, the scale moves m and v.
  EXPECT_NE(one_step(0.1f, 1.0f)[0], one_step(0.0f, 1.0f)[0]);
  EXPECT_NE(one_step(0.0f, 0.25f)[1], one_step(0.0f, 1.0f)[1]);
}

TEST(AdamWCpu, RejectsStepZeroOnEveryPath) {
  float x = 0.0f;
  const AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 0};
  EXPECT_THROW(kernels::cpu::adamw_update_with_copy(&x, &x, &x, &x, nullptr, 1, p),
               tierzero::Error);
  for (CpuIsa isa : kPaths) {
    if (kernels::cpu::cpu_isa_supported(isa)) {
      EXPECT_THROW(kernels::cpu::adamw_update_with_copy_on(isa, &x, &x, &x, &x, nullptr, 1, p),
                   tierzero::Error);
    }
  }
}

// The dispatched entry point runs the best path, or the one TIERZERO_CPU_ISA lowers it to (CTest
// runs this test once more with TIERZERO_CPU_ISA=scalar), and adamw_update is that path without
// the copy.
TEST(AdamWCpu, DispatchFollowsCpuAndEnvironment) {
  CpuIsa expected = CpuIsa::scalar;
  for (CpuIsa isa : kPaths)
    if (kernels::cpu::cpu_isa_supported(isa)) expected = isa;
  const char* env = std::getenv("TIERZERO_CPU_ISA");
  if (env != nullptr && std::string(env) == "scalar") expected = CpuIsa::scalar;
  if (env != nullptr && std::string(env) == "avx2" && expected == CpuIsa::avx512)
    expected = CpuIsa::avx2;
  std::printf("adamw dispatch: %s (TIERZERO_CPU_ISA=%s)\n", kernels::cpu::adamw_isa(),
              env != nullptr ? env : "unset");
  EXPECT_STREQ(kernels::cpu::adamw_isa(), kernels::cpu::cpu_isa_name(expected));

  const size_t n = 4097;
  State a(n, 0, 5), b(n, 0, 5);
  kernels::cpu::adamw_update(a.param(), a.m(), a.v(), a.grad(), n, kGpt2);
  kernels::cpu::adamw_update_with_copy_on(expected, b.param(), b.m(), b.v(), b.grad(), b.out(), n,
                                          kGpt2);
  EXPECT_EQ(first_bit_difference(a.param(), b.param(), n), n);
  EXPECT_EQ(first_bit_difference(a.m(), b.m(), n), n);
  EXPECT_EQ(first_bit_difference(a.v(), b.v(), n), n);
}

}  // namespace
}  // namespace tierzero::test
