// Matmul at each MatmulPrecision against the double reference: fp32 (exact, the reference mode),
// and on CUDA tf32, bf16 and fp16 on the tensor cores (cuBLASLt's fast fp32 compute types, fp32
// in memory, fp32 accumulation). Shapes include sizes that are no multiple of a tensor-core tile
// (N 77, IC 129, OC 200) and a K of 1000 (test_matmul covers the GPT-2 sized fp32 one). The CPU
// backend keeps fp32 whatever is asked: there the same test checks that it says so and that its
// results stay at fp32's tolerance.
//
// Tolerances, relative to |ref| + rms(M) where M[i, j] = sum_k |a_ik| |b_kj| (rounding errors
// scale with the terms, not with a result that cancellation made small): rounding both operands
// to a format of unit roundoff u moves each product by at most about 2u of its magnitude, so an
// element moves by at most 2u M (all errors of one sign; random signs give far less), plus fp32
// accumulation (~1e-6 here).
//   fp32  1e-5   (as test_matmul)
//   tf32  2e-3   u = 2^-11 (10 stored mantissa bits): 2u = 9.8e-4, with margin for M's spread
//   fp16  2e-3   u = 2^-11 as well; inputs ~N(0, 1) are far inside fp16's range
//   bf16  1.5e-2 u = 2^-8 (7 stored mantissa bits): 2u = 7.8e-3, with the same margin
// cuBLASLt may also run FAST_16BF / FAST_16F products in TF32 (cublas_api.h), which only lowers
// the error. The printed max_rel says which arithmetic ran: ~1e-7 is fp32, ~1e-4 tf32 or fp16,
// ~1e-3 bf16.
#include <cmath>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/matmul_precision.hpp"

namespace tierzero::test {
namespace {

using kernels::MatmulPrecision;

class MatmulPrecisionTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(MatmulPrecisionTest);

struct Shape {
  size_t N, IC, OC;
  bool bias;
};
const Shape kShapes[] = {{77, 129, 200, true}, {50, 1000, 130, false}, {5, 1, 3, true}};

double tolerance(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::fp32:
      return 1e-5;
    case MatmulPrecision::tf32:
      return 2e-3;
    case MatmulPrecision::fp16:
      return 2e-3;
    case MatmulPrecision::bf16:
      return 1.5e-2;
  }
  return 1e-5;
}

std::string name(const char* what, MatmulPrecision p, const Shape& s) {
  return std::string(what) + " " + kernels::matmul_precision_name(p) + " N" + std::to_string(s.N) +
         " IC" + std::to_string(s.IC) + " OC" + std::to_string(s.OC) + (s.bias ? " bias" : "");
}

// rms over (r, c) of sum_k |a[r * a_r + k * a_k]| |b[c * b_c + k * b_k]|: the size of the terms
// of each element of a (R, C) product with inner extent K, from the operands' strides.
double magnitude_rms(const std::vector<float>& a, size_t a_r, size_t a_k,  // a: rows r, inner k
                     const std::vector<float>& b, size_t b_c, size_t b_k,  // b: cols c, inner k
                     size_t R, size_t C, size_t K) {
  double sum_sq = 0.0;
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      double m = 0.0;
      for (size_t k = 0; k < K; ++k)
        m += std::fabs(static_cast<double>(a[r * a_r + k * a_k])) *
             std::fabs(static_cast<double>(b[c * b_c + k * b_k]));
      sum_sq += m * m;
    }
  return std::sqrt(sum_sq / static_cast<double>(R * C));
}

TEST_P(MatmulPrecisionTest, EachPrecisionMatchesReference) {
  uint32_t seed = 900;
  for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::tf32, MatmulPrecision::bf16,
                            MatmulPrecision::fp16}) {
    kernels().set_matmul_precision(p);
    // The CPU computes in fp32 whatever is asked, and says so; CUDA takes the setting.
    const MatmulPrecision ran = kernels().matmul_precision();
    EXPECT_EQ(ran, is_cpu() ? MatmulPrecision::fp32 : p);
    const double tol = tolerance(ran);
    for (const Shape& s : kShapes) {
      const std::vector<float> inp = random_normal(s.N * s.IC, seed++);        // (N, IC)
      const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);    // (OC, IC)
      const std::vector<float> bias = random_normal(s.OC, seed++);             // (OC)
      const std::vector<float> dout = random_normal(s.N * s.OC, seed++);       // (N, OC)
      const std::vector<float> dinp0 = random_normal(s.N * s.IC, seed++);      // (N, IC) prior
      const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);  // (OC, IC) prior
      const std::vector<float> dbias0 = random_normal(s.OC, seed++);           // (OC) prior

      auto d_inp = to_device(inp);
      auto d_weight = to_device(weight);
      auto d_bias = to_device(bias);
      auto d_out = to_device(random_normal(s.N * s.OC, seed++));  // (N, OC) garbage to overwrite
      kernels().matmul_forward(d_out->get(), d_inp->get(), d_weight->get(),
                               s.bias ? d_bias->get() : nullptr, s.N, s.IC, s.OC);
      auto d_dout = to_device(dout);
      auto d_dinp = to_device(dinp0);
      auto d_dweight = to_device(dweight0);
      auto d_dbias = to_device(dbias0);
      kernels().matmul_backward(d_dinp->get(), d_dweight->get(), s.bias ? d_dbias->get() : nullptr,
                                d_dout->get(), d_inp->get(), d_weight->get(), s.N, s.IC, s.OC,
                                kernels::GradWrite::accumulate);

      std::vector<double> out(s.N * s.OC);
      const std::vector<double> bias_d = widen(bias);
      ref::matmul_forward(out.data(), widen(inp).data(), widen(weight).data(),
                          s.bias ? bias_d.data() : nullptr, s.N, s.IC, s.OC);
      std::vector<double> dinp(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0), dbias(s.OC, 0.0);
      ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), widen(dout).data(),
                           widen(inp).data(), widen(weight).data(), s.N, s.IC, s.OC);

      // out[n, o] = sum_i inp[n, i] weight[o, i]
      const double out_floor = magnitude_rms(inp, s.IC, 1, weight, s.IC, 1, s.N, s.OC, s.IC);
      // dinp[n, i] = sum_o dout[n, o] weight[o, i]
      const double dinp_floor = magnitude_rms(dout, s.OC, 1, weight, 1, s.IC, s.N, s.IC, s.OC);
      // dweight[o, i] = sum_n dout[n, o] inp[n, i]
      const double dweight_floor = magnitude_rms(dout, 1, s.OC, inp, 1, s.IC, s.OC, s.IC, s.N);
      expect_close(name("matmul_forward out", ran, s), d_out->download(), out, tol, out_floor);
      expect_close(name("matmul_backward dinp", ran, s), d_dinp->download(), plus(dinp0, dinp), tol,
                   dinp_floor);
      expect_close(name("matmul_backward dweight", ran, s), d_dweight->download(),
                   plus(dweight0, dweight), tol, dweight_floor);
      // The bias gradient is a column sum outside the products: fp32 at every precision.
      if (s.bias) {
        expect_close(name("matmul_backward dbias", ran, s), d_dbias->download(),
                     plus(dbias0, dbias), 1e-5);
      }
    }
  }
  kernels().set_matmul_precision(MatmulPrecision::fp32);
}

// gemm_16bit, the native 16-bit product bench train measures the chip's rate with: operands
// rounded to bf16 or fp16 first (by convert_from_f32 on the device), so the reference is the
// double product of the rounded values and only fp32 accumulation is left: 1e-5 as fp32. fp32
// operands are an Error naming the type.
TEST_P(MatmulPrecisionTest, Gemm16BitIsTheProductOfRoundedOperands) {
  uint32_t seed = 950;
  for (DType type : {DType::bf16, DType::f16})
    for (const Shape& s : kShapes) {
      const size_t m = s.N, n = s.OC, k = s.IC;
      const std::vector<float> a = random_normal(m * k, seed++);  // (m, k)
      const std::vector<float> b = random_normal(n * k, seed++);  // (n, k)
      auto d_a = to_device(a), d_b = to_device(b);
      auto d_a16 = empty<uint16_t>(m * k), d_b16 = empty<uint16_t>(n * k);
      kernels().convert_from_f32(d_a16->get(), type, d_a->get(), m * k);
      kernels().convert_from_f32(d_b16->get(), type, d_b->get(), n * k);
      // The rounded values, widened back: what the product multiplies.
      auto d_ar = empty<float>(m * k), d_br = empty<float>(n * k);
      kernels().convert_to_f32(d_ar->get(), d_a16->get(), type, m * k);
      kernels().convert_to_f32(d_br->get(), d_b16->get(), type, n * k);
      const std::vector<float> ar = d_ar->download(), br = d_br->download();
      auto d_c = to_device(random_normal(m * n, seed++));  // (m, n) garbage to overwrite
      kernels().gemm_16bit(d_c->get(), d_a16->get(), d_b16->get(), type, m, n, k);
      std::vector<double> c(m * n);
      ref::matmul_forward(c.data(), widen(ar).data(), widen(br).data(), nullptr, m, k, n);
      const std::string label = std::string("gemm_16bit ") + dtype_name(type) + " m" +
                                std::to_string(m) + " n" + std::to_string(n) + " k" +
                                std::to_string(k);
      expect_close(label, d_c->download(), c, 1e-5, magnitude_rms(ar, k, 1, br, k, 1, m, n, k));
    }
  auto d_x = empty<float>(4);
  EXPECT_THROW(kernels().gemm_16bit(d_x->get(), d_x->get(), d_x->get(), DType::f32, 2, 2, 1),
               Error);
}

TEST(MatmulPrecisionNames, RoundTripAndRejectUnknown) {
  for (MatmulPrecision p :
       {MatmulPrecision::fp32, MatmulPrecision::tf32, MatmulPrecision::bf16, MatmulPrecision::fp16})
    EXPECT_EQ(kernels::matmul_precision_from_name(kernels::matmul_precision_name(p)), p);
  EXPECT_THROW(kernels::matmul_precision_from_name("fp8"), tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
