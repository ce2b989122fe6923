// The 16-bit norms, Kernels::layernorm16_* and rmsnorm16_* (forward, fused with the residual add,
// backward), on every backend: bitwise the fp32 op on the widened parameters followed by
// convert_from_f32 (the output, and the backward's 16-bit copy of the input gradient where asked
// for; untouched where not) and bitwise that op's statistics, residual and gradients; and
// against the double reference of the rounded parameters, within one rounding of the output's
// type (at most 2^-8 of |ref| in bf16, 2^-11 in fp16: 4e-3 and 5e-4 of |ref| + rms(ref), with
// the fp32 rows' own 1e-5 inside) and 1e-5 for what stays fp32. C covers sizes that are not a
// multiple of a warp. Inputs have a mean far from zero (3, with standard deviation 2), as
// test_layernorm.cpp's.
#include <cmath>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class Norm16Test : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(Norm16Test);

struct Shape {
  size_t N, C;
};
const Shape kShapes[] = {{7, 48}, {33, 768}, {5, 13}, {16, 1600}, {1, 1}, {9, 100}};
const DType kTypes[] = {DType::bf16, DType::f16};
constexpr float kEps = 1e-6f;  // RMSNorm's

std::string name(const std::string& what, DType type, const Shape& s) {
  return what + " " + dtype_name(type) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C);
}

double out_tolerance(DType type) {
  return type == DType::bf16 ? 4e-3 : 5e-4;
}

// y (N, C) = weight * x / sqrt(mean(x^2) + eps) in double: RMSNorm's reference.
std::vector<double> rmsnorm_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      size_t N, size_t C) {
  std::vector<double> y(N * C);
  for (size_t n = 0; n < N; ++n) {
    double sq = 0.0;
    for (size_t c = 0; c < C; ++c) {
      const double v = x[n * C + c];
      sq += v * v;
    }
    const double s = 1.0 / std::sqrt(sq / static_cast<double>(C) + static_cast<double>(kEps));
    for (size_t c = 0; c < C; ++c) {
      const double v = x[n * C + c], g = w[c];
      y[n * C + c] = g * (v * s);
    }
  }
  return y;
}

// What a test compares: the 16-bit op's outputs and those of the fp32 op on the widened
// parameters with its output rounded on the same backend.
struct Parameters {
  Rounded weight, bias;  // (C) each
};
Parameters parameters(const Shape& s, DType type, uint32_t& seed) {
  return {rounded(random_normal(s.C, seed++, 0.1f, 1.0f), type),
          rounded(random_normal(s.C, seed++, 0.1f), type)};
}

TEST_P(Norm16Test, LayerNormForwardIsTheFp32OpRounded) {
  uint32_t seed = 2000;
  for (DType type : kTypes)
    for (const Shape& s : kShapes) {
      const size_t n = s.N * s.C;
      const std::vector<float> a = random_normal(n, seed++, 2.0f, 3.0f);    // (N, C)
      const std::vector<float> b = random_normal(n, seed++, 0.5f, -0.25f);  // (N, C)
      const Parameters p = parameters(s, type, seed);
      auto d_a = to_device(a), d_b = to_device(b);
      auto d_w16 = to_device(p.weight.bits), d_b16 = to_device(p.bias.bits);
      auto d_w = to_device(p.weight.values), d_bias = to_device(p.bias.values);
      // The plain forward of a, and the fused one of a + b, each in 16 bits and in fp32.
      auto out = to_device(poison(n)), mean = to_device(poison(s.N)), rstd = to_device(poison(s.N));
      kernels().layernorm16_forward(out->get(), mean->get(), rstd->get(), d_a->get(), d_w16->get(),
                                    d_b16->get(), type, s.N, s.C);
      auto out32 = empty<float>(n), mean32 = empty<float>(s.N), rstd32 = empty<float>(s.N);
      kernels().layernorm_forward(out32->get(), mean32->get(), rstd32->get(), d_a->get(),
                                  d_w->get(), d_bias->get(), s.N, s.C);
      auto rounded_out = to_device(poison(n));
      kernels().convert_from_f32(rounded_out->get(), type, out32->get(), n);
      const std::vector<float> got = out->download();
      EXPECT_TRUE(same_bits(got, rounded_out->download())) << name("layernorm16 out bits", type, s);
      EXPECT_TRUE(same_bits(mean->download(), mean32->download())) << name("mean bits", type, s);
      EXPECT_TRUE(same_bits(rstd->download(), rstd32->download())) << name("rstd bits", type, s);
      std::vector<double> ref(n), ref_mean(s.N), ref_rstd(s.N);
      ref::layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), widen(a).data(),
                             widen(p.weight.values).data(), widen(p.bias.values).data(), s.N, s.C);
      expect_close(name("layernorm16_forward out", type, s), result_values(got, type, n), ref,
                   out_tolerance(type));

      auto residual = to_device(poison(n)), fused = to_device(poison(n));
      kernels().fused_residual_layernorm16_forward(residual->get(), fused->get(), mean->get(),
                                                   rstd->get(), d_a->get(), d_b->get(),
                                                   d_w16->get(), d_b16->get(), type, s.N, s.C);
      auto residual32 = empty<float>(n);
      kernels().fused_residual_layernorm_forward(residual32->get(), out32->get(), mean32->get(),
                                                 rstd32->get(), d_a->get(), d_b->get(), d_w->get(),
                                                 d_bias->get(), s.N, s.C);
      kernels().convert_from_f32(rounded_out->get(), type, out32->get(), n);
      EXPECT_TRUE(same_bits(fused->download(), rounded_out->download()))
          << name("fused out bits", type, s);
      EXPECT_TRUE(same_bits(residual->download(), residual32->download()))
          << name("fused residual bits", type, s);
      EXPECT_TRUE(same_bits(mean->download(), mean32->download())) << name("fused mean", type, s);
      EXPECT_TRUE(same_bits(rstd->download(), rstd32->download())) << name("fused rstd", type, s);
    }
}

TEST_P(Norm16Test, LayerNormBackwardIsTheFp32OpOnTheWidenedWeight) {
  uint32_t seed = 2100;
  for (DType type : kTypes)
    for (const Shape& s : kShapes) {
      const size_t n = s.N * s.C;
      const std::vector<float> inp = random_normal(n, seed++, 2.0f, 3.0f);  // (N, C)
      const std::vector<float> dout = random_normal(n, seed++);             // (N, C)
      const Parameters p = parameters(s, type, seed);
      std::vector<double> out(n), mean(s.N), rstd(s.N);
      ref::layernorm_forward(out.data(), mean.data(), rstd.data(), widen(inp).data(),
                             widen(p.weight.values).data(), widen(p.bias.values).data(), s.N, s.C);
      const std::vector<float> dinp0 = random_normal(n, seed++);  // (N, C) prior
      const std::vector<float> dweight0 = random_normal(s.C, seed++);
      const std::vector<float> dbias0 = random_normal(s.C, seed++);
      auto d_inp = to_device(inp), d_dout = to_device(dout);
      auto d_mean = to_device(narrow(mean)), d_rstd = to_device(narrow(rstd));
      auto d_w16 = to_device(p.weight.bits);
      auto d_w = to_device(p.weight.values);
      auto dinp = to_device(dinp0), dweight = to_device(dweight0), dbias = to_device(dbias0);
      // (N, C) of `type`: the new dinp rounded, written in the same pass (every other shape: none)
      auto dinp16 = to_device(poison(n));
      const bool with16 = (seed % 2) == 0;
      kernels().layernorm16_backward(dinp->get(), with16 ? dinp16->get() : nullptr, dweight->get(),
                                     dbias->get(), d_dout->get(), d_inp->get(), d_w16->get(),
                                     d_mean->get(), d_rstd->get(), type, s.N, s.C);
      auto dinp32 = to_device(dinp0), dweight32 = to_device(dweight0);
      auto dbias32 = to_device(dbias0);
      kernels().layernorm_backward(dinp32->get(), dweight32->get(), dbias32->get(), d_dout->get(),
                                   d_inp->get(), d_w->get(), d_mean->get(), d_rstd->get(), s.N,
                                   s.C);
      const std::vector<float> got_dinp = dinp->download();
      EXPECT_TRUE(same_bits(got_dinp, dinp32->download())) << name("dinp bits", type, s);
      auto rounded_dinp = to_device(poison(n));
      if (with16) kernels().convert_from_f32(rounded_dinp->get(), type, dinp32->get(), n);
      EXPECT_TRUE(same_bits(dinp16->download(), rounded_dinp->download()))
          << name(with16 ? "dinp16 bits" : "dinp16 untouched", type, s);
      EXPECT_TRUE(same_bits(dweight->download(), dweight32->download()))
          << name("dweight bits", type, s);
      EXPECT_TRUE(same_bits(dbias->download(), dbias32->download())) << name("dbias bits", type, s);
      std::vector<double> ref_dinp(n, 0.0), ref_dweight(s.C, 0.0), ref_dbias(s.C, 0.0);
      ref::layernorm_backward(ref_dinp.data(), ref_dweight.data(), ref_dbias.data(),
                              widen(dout).data(), widen(inp).data(), widen(p.weight.values).data(),
                              s.N, s.C);
      // (At C 1 the exact dinp is 0 and rstd, 1 / sqrt(eps), magnifies the rounding of
      // dout * weight a fused multiply-add leaves: there the bits above are the check.)
      if (s.C > 1) {
        expect_close(name("layernorm16_backward dinp", type, s), got_dinp, plus(dinp0, ref_dinp),
                     1e-5);
      }
    }
}

TEST_P(Norm16Test, RmsNormIsTheFp32OpRounded) {
  uint32_t seed = 2200;
  for (DType type : kTypes)
    for (const Shape& s : kShapes) {
      const size_t n = s.N * s.C;
      const std::vector<float> a = random_normal(n, seed++, 2.0f, 3.0f);    // (N, C)
      const std::vector<float> b = random_normal(n, seed++, 0.5f, -0.25f);  // (N, C)
      const std::vector<float> dout = random_normal(n, seed++);             // (N, C)
      const Parameters p = parameters(s, type, seed);
      auto d_a = to_device(a), d_b = to_device(b), d_dout = to_device(dout);
      auto d_w16 = to_device(p.weight.bits);
      auto d_w = to_device(p.weight.values);
      auto out = to_device(poison(n)), rstd = to_device(poison(s.N));
      kernels().rmsnorm16_forward(out->get(), rstd->get(), d_a->get(), d_w16->get(), type, s.N, s.C,
                                  kEps);
      auto out32 = empty<float>(n), rstd32 = empty<float>(s.N);
      kernels().rmsnorm_forward(out32->get(), rstd32->get(), d_a->get(), d_w->get(), s.N, s.C,
                                kEps);
      auto rounded_out = to_device(poison(n));
      kernels().convert_from_f32(rounded_out->get(), type, out32->get(), n);
      const std::vector<float> got = out->download();
      EXPECT_TRUE(same_bits(got, rounded_out->download())) << name("rmsnorm16 out bits", type, s);
      EXPECT_TRUE(same_bits(rstd->download(), rstd32->download())) << name("rstd bits", type, s);
      expect_close(name("rmsnorm16_forward out", type, s), result_values(got, type, n),
                   rmsnorm_reference(a, p.weight.values, s.N, s.C), out_tolerance(type));

      auto residual = to_device(poison(n)), fused = to_device(poison(n));
      kernels().fused_residual_rmsnorm16_forward(residual->get(), fused->get(), rstd->get(),
                                                 d_a->get(), d_b->get(), d_w16->get(), type, s.N,
                                                 s.C, kEps);
      auto residual32 = empty<float>(n);
      kernels().fused_residual_rmsnorm_forward(residual32->get(), out32->get(), rstd32->get(),
                                               d_a->get(), d_b->get(), d_w->get(), s.N, s.C, kEps);
      kernels().convert_from_f32(rounded_out->get(), type, out32->get(), n);
      EXPECT_TRUE(same_bits(fused->download(), rounded_out->download()))
          << name("fused rmsnorm16 out bits", type, s);
      EXPECT_TRUE(same_bits(residual->download(), residual32->download()))
          << name("fused rmsnorm16 residual bits", type, s);
      EXPECT_TRUE(same_bits(rstd->download(), rstd32->download()))
          << name("fused rmsnorm16 rstd bits", type, s);

      const std::vector<float> dinp0 = random_normal(n, seed++);       // (N, C) prior
      const std::vector<float> dweight0 = random_normal(s.C, seed++);  // (C) prior
      auto dinp = to_device(dinp0), dweight = to_device(dweight0);
      auto dinp16 = to_device(poison(n));  // (N, C) type, as layernorm's
      const bool with16 = (seed % 2) == 0;
      kernels().rmsnorm16_backward(dinp->get(), with16 ? dinp16->get() : nullptr, dweight->get(),
                                   d_dout->get(), d_a->get(), d_w16->get(), rstd32->get(), type,
                                   s.N, s.C);
      auto dinp32 = to_device(dinp0), dweight32 = to_device(dweight0);
      kernels().rmsnorm_backward(dinp32->get(), dweight32->get(), d_dout->get(), d_a->get(),
                                 d_w->get(), rstd32->get(), s.N, s.C);
      EXPECT_TRUE(same_bits(dinp->download(), dinp32->download()))
          << name("rmsnorm16 dinp bits", type, s);
      auto rounded_dinp = to_device(poison(n));
      if (with16) kernels().convert_from_f32(rounded_dinp->get(), type, dinp32->get(), n);
      EXPECT_TRUE(same_bits(dinp16->download(), rounded_dinp->download()))
          << name(with16 ? "rmsnorm16 dinp16 bits" : "rmsnorm16 dinp16 untouched", type, s);
      EXPECT_TRUE(same_bits(dweight->download(), dweight32->download()))
          << name("rmsnorm16 dweight bits", type, s);
    }
}

TEST_P(Norm16Test, RefusesOtherTypes) {
  auto x = to_device(poison(8));
  const auto refused = [](const auto& call, const std::string& op) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(op + ": operands of type fp32"), std::string::npos)
          << e.what();
      return;
    }
    ADD_FAILURE() << op << " accepted fp32 operands";
  };
  float* f = x->get();
  refused([&] { kernels().layernorm16_forward(f, f, f, f, f, f, DType::f32, 1, 2); },
          "layernorm16_forward");
  refused([&] { kernels().rmsnorm16_backward(f, f, f, f, f, f, f, DType::f32, 1, 2); },
          "rmsnorm16_backward");
  EXPECT_TRUE(same_bits(x->download(), poison(8))) << "a refused call wrote";
}

}  // namespace
}  // namespace tierzero::test
