// The MLP's fused products, Kernels::matmul_gelu_forward and matmul_backward_gelu, against the
// double reference on every backend; on CUDA at shapes where cuBLASLt's GELU epilogues run (the
// outputs' rows a multiple of 8: GPT-2's fc 768 -> 3072 and its projection back) and where the
// backend falls back to two ops (13, 1001, 300 rows), at fp32 and at bf16 precision (the products
// on the tensor cores with the epilogues, as bf16 training runs them). On the CPU they must also
// give the bits of the unfused calls they replace in the MLP, so that CPU training is unchanged.
//
// Tolerances (of |ref| + rms of the products' magnitudes, as test_matmul_precision.cpp): the
// products 1e-5 in fp32, 1.5e-2 at bf16 (operands rounded to 8 significant bits). GELU and its
// gradient on CUDA come from cuBLASLt's epilogue, which does not say how it computes tanh (a
// hardware tanh.approx has a relative error near 2^-11): 2e-3 there until a GPU run shows the
// real figure, which the test prints.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/kernels/matmul_precision.hpp"

namespace tierzero::test {
namespace {

class MatmulGeluTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(MatmulGeluTest);

struct Shape {
  size_t N, IC, OC;
  bool bias;
};
const Shape kShapes[] = {{7, 48, 13, true},     {37, 96, 200, false},  {64, 768, 3072, true},
                         {64, 3072, 768, true}, {50, 300, 1001, true}, {33, 136, 64, false},
                         {5, 1, 8, true}};

std::string name(const char* what, const Shape& s) {
  return std::string(what) + " N" + std::to_string(s.N) + " IC" + std::to_string(s.IC) + " OC" +
         std::to_string(s.OC) + (s.bias ? " bias" : " nobias");
}

using kernels::MatmulPrecision;

// The products' tolerance at the precision the backend took, and GELU's on top of it.
struct Tolerance {
  double product, gelu;
};
Tolerance tolerance_for(kernels::Kernels& k, bool cpu) {
  const double product = k.matmul_precision() == MatmulPrecision::bf16 ? 1.5e-2 : 1e-5;
  return {product, cpu ? product : std::max(product, 2e-3)};
}

TEST_P(MatmulGeluTest, ForwardMatchesReference) {
  uint32_t seed = 900;
  for (MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16})
    for (const Shape& s : kShapes) {
      kernels().set_matmul_precision(precision);
      const Tolerance tol = tolerance_for(kernels(), is_cpu());
      const std::vector<float> inp = random_normal(s.N * s.IC, seed++, 0.05f);  // (N, IC)
      const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);     // (OC, IC)
      const std::vector<float> bias = random_normal(s.OC, seed++, 0.5f);        // (OC)
      auto d_inp = to_device(inp);
      auto d_weight = to_device(weight);
      auto d_bias = to_device(bias);
      auto d_pre = to_device(random_normal(s.N * s.OC, seed++));  // (N, OC) garbage to overwrite
      auto d_out = to_device(random_normal(s.N * s.OC, seed++));  // (N, OC) garbage to overwrite
      const float* b = s.bias ? d_bias->get() : nullptr;
      kernels().matmul_gelu_forward(d_out->get(), d_pre->get(), d_inp->get(), d_weight->get(), b,
                                    s.N, s.IC, s.OC);

      std::vector<double> pre(s.N * s.OC), out(s.N * s.OC), magnitude(s.N * s.OC);
      const std::vector<double> bias_d = widen(bias);
      ref::matmul_forward(pre.data(), widen(inp).data(), widen(weight).data(),
                          s.bias ? bias_d.data() : nullptr, s.N, s.IC, s.OC);
      ref::gelu_forward(out.data(), pre.data(), out.size());
      ref::matmul_forward(magnitude.data(), absolute(widen(inp)).data(),
                          absolute(widen(weight)).data(),
                          s.bias ? absolute(bias_d).data() : nullptr, s.N, s.IC, s.OC);
      const double floor = rms(magnitude);
      const std::vector<float> got_pre = d_pre->download(), got_out = d_out->download();
      const std::string at =
          std::string(" ") + kernels::matmul_precision_name(kernels().matmul_precision());
      expect_close(name("matmul_gelu_forward pre", s) + at, got_pre, pre, tol.product, floor);
      expect_close(name("matmul_gelu_forward out", s) + at, got_out, out, tol.gelu, floor);

      if (!is_cpu()) continue;
      // The CPU backend's fused call is its two ops, bit for bit.
      auto d_pre2 = empty<float>(s.N * s.OC);
      auto d_out2 = empty<float>(s.N * s.OC);
      kernels().matmul_forward(d_pre2->get(), d_inp->get(), d_weight->get(), b, s.N, s.IC, s.OC);
      kernels().gelu_forward(d_out2->get(), d_pre2->get(), s.N * s.OC);
      EXPECT_TRUE(same_bits(got_pre, d_pre2->download())) << name("pre bits", s);
      EXPECT_TRUE(same_bits(got_out, d_out2->download())) << name("out bits", s);
    }
  kernels().set_matmul_precision(MatmulPrecision::fp32);
}

TEST_P(MatmulGeluTest, BackwardMatchesReference) {
  uint32_t seed = 950;
  for (MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16})
    for (const Shape& s : kShapes) {
      kernels().set_matmul_precision(precision);
      const Tolerance tol = tolerance_for(kernels(), is_cpu());
      const std::string at =
          std::string(" ") + kernels::matmul_precision_name(kernels().matmul_precision());
      // (N, IC) the forward's pre-activations and gelu of them: this product's input.
      const std::vector<float> pre = random_normal(s.N * s.IC, seed++, 1.5f);
      std::vector<double> act_d(pre.size());
      ref::gelu_forward(act_d.data(), widen(pre).data(), pre.size());
      const std::vector<float> act = narrow(act_d);
      const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);    // (OC, IC)
      const std::vector<float> dout = random_normal(s.N * s.OC, seed++);       // (N, OC)
      const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);  // (OC, IC) prior
      const std::vector<float> dbias0 = random_normal(s.OC, seed++);           // (OC) prior
      auto d_pre = to_device(pre);
      auto d_act = to_device(act);
      auto d_weight = to_device(weight);
      auto d_dout = to_device(dout);
      auto d_dpre = to_device(random_normal(s.N * s.IC, seed++));  // garbage: overwritten
      auto d_dweight = to_device(dweight0);
      auto d_dbias = to_device(dbias0);
      kernels().matmul_backward_gelu(d_dpre->get(), d_dweight->get(),
                                     s.bias ? d_dbias->get() : nullptr, d_dout->get(), d_act->get(),
                                     d_pre->get(), d_weight->get(), s.N, s.IC, s.OC);

      std::vector<double> dact(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0), dbias(s.OC, 0.0);
      ref::matmul_backward(dact.data(), dweight.data(), dbias.data(), widen(dout).data(),
                           widen(act).data(), widen(weight).data(), s.N, s.IC, s.OC);
      std::vector<double> dpre(s.N * s.IC, 0.0);
      ref::gelu_backward(dpre.data(), widen(pre).data(), dact.data(), dpre.size());
      std::vector<double> magnitude(s.N * s.IC, 0.0), unused_w(s.OC * s.IC, 0.0);
      ref::matmul_backward(magnitude.data(), unused_w.data(), nullptr, absolute(widen(dout)).data(),
                           absolute(widen(act)).data(), absolute(widen(weight)).data(), s.N, s.IC,
                           s.OC);
      const std::vector<float> got_dpre = d_dpre->download();
      expect_close(name("matmul_backward_gelu dpre", s) + at, got_dpre, dpre, tol.gelu,
                   rms(magnitude));
      const std::vector<float> got_dweight = d_dweight->download();
      expect_close(name("matmul_backward_gelu dweight", s) + at, got_dweight,
                   plus(dweight0, dweight), tol.product);
      // The bias gradient is a column sum outside the products: fp32 at every precision.
      if (s.bias) {
        expect_close(name("matmul_backward_gelu dbias", s) + at, d_dbias->download(),
                     plus(dbias0, dbias), 1e-5);
      }

      if (!is_cpu()) continue;
      // The MLP's unfused sequence: zeroed gradients, the projection's backward, GELU's backward.
      auto d_dact2 = to_device(std::vector<float>(s.N * s.IC, 0.0f));
      auto d_dpre2 = to_device(std::vector<float>(s.N * s.IC, 0.0f));
      auto d_dweight2 = to_device(dweight0);
      kernels().matmul_backward(d_dact2->get(), d_dweight2->get(), nullptr, d_dout->get(),
                                d_act->get(), d_weight->get(), s.N, s.IC, s.OC,
                                kernels::GradWrite::accumulate);
      kernels().gelu_backward(d_dpre2->get(), d_pre->get(), d_dact2->get(), s.N * s.IC);
      EXPECT_TRUE(same_bits(got_dpre, d_dpre2->download())) << name("dpre bits", s);
      EXPECT_TRUE(same_bits(got_dweight, d_dweight2->download())) << name("dweight bits", s);
    }
  kernels().set_matmul_precision(MatmulPrecision::fp32);
}

}  // namespace
}  // namespace tierzero::test
