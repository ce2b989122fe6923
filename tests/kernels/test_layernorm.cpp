// LayerNorm kernels against the double reference, on every backend. Inputs have a mean far from
// zero (3, with standard deviation 2) so that a one-pass variance would show its cancellation.
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

}  // namespace
}  // namespace tierzero::test
