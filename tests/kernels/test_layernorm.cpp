// LayerNorm kernels against the double reference, on every backend. Inputs have a mean far from
// zero (3, with standard deviation 2) so that a one-pass variance would show its cancellation.
// The residual add fused with the layernorm must also give the bits of the two unfused calls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"

namespace tierzero::test {
namespace {

class LayerNormTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(LayerNormTest);

struct LayerNormShape {
  size_t N, C;
};
const LayerNormShape kShapes[] = {{7, 48}, {33, 768}, {5, 13}, {16, 1600}, {1, 1}};

std::string name(const char* what, const LayerNormShape& s) {
  return std::string(what) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C);
}

TEST_P(LayerNormTest, ForwardMatchesReference) {
  uint32_t seed = 300;
  for (const LayerNormShape& s : kShapes) {
    const std::vector<float> inp = random_normal(s.N * s.C, seed++, 2.0f, 3.0f);  // (N, C)
    const std::vector<float> weight = random_normal(s.C, seed++, 0.1f, 1.0f);     // (C)
    const std::vector<float> bias = random_normal(s.C, seed++, 0.1f);             // (C)
    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_bias = to_device(bias);
    auto d_out = empty<float>(s.N * s.C);  // (N, C)
    auto d_mean = empty<float>(s.N);       // (N)
    auto d_rstd = empty<float>(s.N);       // (N)
    kernels().layernorm_forward(d_out->get(), d_mean->get(), d_rstd->get(), d_inp->get(),
                                d_weight->get(), d_bias->get(), s.N, s.C);

    std::vector<double> out(s.N * s.C), mean(s.N), rstd(s.N);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), widen(inp).data(),
                           widen(weight).data(), widen(bias).data(), s.N, s.C);
    // fp32 row sums over C channels (mean error ~1e-6 relative feeds every output).
    expect_close(name("layernorm_forward out", s), d_out->download(), out, 1e-5);
    expect_close(name("layernorm_forward mean", s), d_mean->download(), mean, 1e-5);
    expect_close(name("layernorm_forward rstd", s), d_rstd->download(), rstd, 1e-5);
  }
}

TEST_P(LayerNormTest, BackwardAccumulates) {
  uint32_t seed = 400;
  for (const LayerNormShape& s : kShapes) {
    const std::vector<float> inp = random_normal(s.N * s.C, seed++, 2.0f, 3.0f);  // (N, C)
    const std::vector<float> weight = random_normal(s.C, seed++, 0.1f, 1.0f);     // (C)
    const std::vector<float> bias = random_normal(s.C, seed++, 0.1f);             // (C)
    const std::vector<float> dout = random_normal(s.N * s.C, seed++);             // (N, C)
    const std::vector<float> dinp0 = random_normal(s.N * s.C, seed++);            // (N, C) prior
    const std::vector<float> dweight0 = random_normal(s.C, seed++);               // (C) prior
    const std::vector<float> dbias0 = random_normal(s.C, seed++);                 // (C) prior

    // mean and rstd as the forward would have saved them: the reference's, rounded to fp32.
    std::vector<double> out(s.N * s.C), mean(s.N), rstd(s.N);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), widen(inp).data(),
                           widen(weight).data(), widen(bias).data(), s.N, s.C);

    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_dout = to_device(dout);
    auto d_mean = to_device(narrow(mean));
    auto d_rstd = to_device(narrow(rstd));
    auto d_dinp = to_device(dinp0);
    auto d_dweight = to_device(dweight0);
    auto d_dbias = to_device(dbias0);
    kernels().layernorm_backward(d_dinp->get(), d_dweight->get(), d_dbias->get(), d_dout->get(),
                                 d_inp->get(), d_weight->get(), d_mean->get(), d_rstd->get(), s.N,
                                 s.C);

    std::vector<double> dinp(s.N * s.C, 0.0), dweight(s.C, 0.0), dbias(s.C, 0.0);
    ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), widen(dout).data(),
                            widen(inp).data(), widen(weight).data(), s.N, s.C);
    expect_close(name("layernorm_backward dinp", s), d_dinp->download(), plus(dinp0, dinp), 1e-5);
    expect_close(name("layernorm_backward dweight", s), d_dweight->download(),
                 plus(dweight0, dweight), 1e-5);
    expect_close(name("layernorm_backward dbias", s), d_dbias->download(), plus(dbias0, dbias),
                 1e-5);
  }
}

// Elements of got and want whose bits differ, and the largest |got - want|.
struct BitCompare {
  size_t differ = 0;
  double max_abs = 0.0;
};
BitCompare compare_bits(const std::vector<float>& got, const std::vector<float>& want) {
  BitCompare r;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    ++r.differ;
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    r.max_abs = std::max(r.max_abs, d == d ? d : std::numeric_limits<double>::infinity());
  }
  return r;
}

// fused_residual_layernorm_forward against residual_forward then layernorm_forward (bit for bit:
// the block's results must not change by fusing), and against the double reference of
// layernorm(a + b). C covers sizes that are not a multiple of a warp (13, 100, 1) and GPT-2's
// (768, 1600); a and b are the stream and a branch output, both non-zero with a non-zero mean.
TEST_P(LayerNormTest, FusedResidualForwardMatchesUnfusedPair) {
  uint32_t seed = 500;
  const LayerNormShape shapes[] = {{7, 48}, {33, 768}, {5, 13}, {16, 1600}, {1, 1}, {9, 100}};
  for (const LayerNormShape& s : shapes) {
    const size_t n = s.N * s.C;
    const std::vector<float> a = random_normal(n, seed++, 2.0f, 3.0f);         // (N, C)
    const std::vector<float> b = random_normal(n, seed++, 0.5f, -0.25f);       // (N, C)
    const std::vector<float> weight = random_normal(s.C, seed++, 0.1f, 1.0f);  // (C)
    const std::vector<float> bias = random_normal(s.C, seed++, 0.1f);          // (C)
    auto d_a = to_device(a);
    auto d_b = to_device(b);
    auto d_weight = to_device(weight);
    auto d_bias = to_device(bias);

    // Unfused: the two calls the block made before.
    auto u_res = empty<float>(n);     // (N, C)
    auto u_out = empty<float>(n);     // (N, C)
    auto u_mean = empty<float>(s.N);  // (N)
    auto u_rstd = empty<float>(s.N);  // (N)
    kernels().residual_forward(u_res->get(), d_a->get(), d_b->get(), n);
    kernels().layernorm_forward(u_out->get(), u_mean->get(), u_rstd->get(), u_res->get(),
                                d_weight->get(), d_bias->get(), s.N, s.C);
    // Fused, into fresh buffers, then again in place: residual aliasing a, as residual_forward
    // allows.
    auto f_res = empty<float>(n);     // (N, C)
    auto f_out = empty<float>(n);     // (N, C)
    auto f_mean = empty<float>(s.N);  // (N)
    auto f_rstd = empty<float>(s.N);  // (N)
    kernels().fused_residual_layernorm_forward(f_res->get(), f_out->get(), f_mean->get(),
                                               f_rstd->get(), d_a->get(), d_b->get(),
                                               d_weight->get(), d_bias->get(), s.N, s.C);
    auto i_res = to_device(a);        // (N, C) a, overwritten by the sum
    auto i_out = empty<float>(n);     // (N, C)
    auto i_mean = empty<float>(s.N);  // (N)
    auto i_rstd = empty<float>(s.N);  // (N)
    kernels().fused_residual_layernorm_forward(i_res->get(), i_out->get(), i_mean->get(),
                                               i_rstd->get(), i_res->get(), d_b->get(),
                                               d_weight->get(), d_bias->get(), s.N, s.C);

    const std::vector<float> unfused[] = {u_res->download(), u_out->download(), u_mean->download(),
                                          u_rstd->download()};
    const std::vector<float> fused[] = {f_res->download(), f_out->download(), f_mean->download(),
                                        f_rstd->download()};
    const std::vector<float> in_place[] = {i_res->download(), i_out->download(), i_mean->download(),
                                           i_rstd->download()};
    const char* what[] = {"residual", "out", "mean", "rstd"};
    for (int t = 0; t < 4; ++t) {
      const BitCompare f = compare_bits(fused[t], unfused[t]);
      const BitCompare i = compare_bits(in_place[t], unfused[t]);
      std::printf(
          "%s: fused vs unfused: %zu of %zu elements differ in bits (max_abs %.3g); "
          "in place: %zu (max_abs %.3g)\n",
          name((std::string("fused_residual_layernorm ") + what[t]).c_str(), s).c_str(), f.differ,
          unfused[t].size(), f.max_abs, i.differ, i.max_abs);
      EXPECT_EQ(f.differ, 0u) << name(what[t], s);
      EXPECT_EQ(i.differ, 0u) << name(what[t], s) << " in place";
    }

    // The reference: layernorm of the exact sum.
    std::vector<double> sum(n), out(n), mean(s.N), rstd(s.N);
    for (size_t i = 0; i < n; ++i) sum[i] = static_cast<double>(a[i]) + static_cast<double>(b[i]);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), widen(weight).data(),
                           widen(bias).data(), s.N, s.C);
    // The sum is one fp32 rounding; the layernorm's tolerance is ForwardMatchesReference's.
    expect_close(name("fused_residual_layernorm residual", s), fused[0], sum, 1e-6);
    expect_close(name("fused_residual_layernorm out", s), fused[1], out, 1e-5);
    expect_close(name("fused_residual_layernorm mean", s), fused[2], mean, 1e-5);
    expect_close(name("fused_residual_layernorm rstd", s), fused[3], rstd, 1e-5);
  }
}

}  // namespace
}  // namespace tierzero::test
