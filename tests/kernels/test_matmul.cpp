// Matmul kernels against the double reference, on every backend, with and without bias, from
// tiny odd shapes to a GPT-2 sized one (N=64, C=768 -> 3C=2304). The CPU backend splits large
// products into per-thread blocks, so odd shapes above its threshold and odd thread counts are
// covered too.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"

namespace tierzero::test {
namespace {

class MatmulTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(MatmulTest);

struct MatmulShape {
  size_t N, IC, OC;
  bool bias;
};
const MatmulShape kShapes[] = {{7, 48, 13, true},     {37, 96, 200, false}, {64, 768, 2304, true},
                               {50, 300, 1001, true}, {5, 1, 3, true},      {1, 3, 1, false}};

std::string name(const char* what, const MatmulShape& s) {
  return std::string(what) + " N" + std::to_string(s.N) + " IC" + std::to_string(s.IC) + " OC" +
         std::to_string(s.OC) + (s.bias ? " bias" : " nobias");
}

TEST_P(MatmulTest, ForwardMatchesReference) {
  uint32_t seed = 500;
  for (const MatmulShape& s : kShapes) {
    const std::vector<float> inp = random_normal(s.N * s.IC, seed++);      // (N, IC)
    const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);  // (OC, IC)
    const std::vector<float> bias = random_normal(s.OC, seed++);           // (OC)
    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_bias = to_device(bias);
    auto d_out = to_device(random_normal(s.N * s.OC, seed++));  // (N, OC), garbage to overwrite
    kernels().matmul_forward(d_out->get(), d_inp->get(), d_weight->get(),
                             s.bias ? d_bias->get() : nullptr, s.N, s.IC, s.OC);

    std::vector<double> out(s.N * s.OC);
    const std::vector<double> bias_d = widen(bias);
    ref::matmul_forward(out.data(), widen(inp).data(), widen(weight).data(),
                        s.bias ? bias_d.data() : nullptr, s.N, s.IC, s.OC);
    // fp32 dot products of up to 768 terms: their rounding error scales with the sum of the
    // terms' magnitudes, not with the result (which cancellation can make tiny: a 3-term dot
    // product on CUDA was 2.5e-5 relative to its own value, 7e-8 relative to its terms).
    std::vector<double> magnitude(s.N * s.OC);
    std::vector<double> abs_inp = widen(inp), abs_weight = widen(weight);
    for (double& v : abs_inp) v = std::fabs(v);
    for (double& v : abs_weight) v = std::fabs(v);
    ref::matmul_forward(magnitude.data(), abs_inp.data(), abs_weight.data(), nullptr, s.N, s.IC,
                        s.OC);
    double sum_sq = 0.0;
    for (double m : magnitude) sum_sq += m * m;
    const double floor = std::sqrt(sum_sq / static_cast<double>(magnitude.size()));
    expect_close(name("matmul_forward out", s), d_out->download(), out, 1e-5, floor);
  }
}

TEST_P(MatmulTest, BackwardAccumulates) {
  uint32_t seed = 600;
  for (const MatmulShape& s : kShapes) {
    const std::vector<float> inp = random_normal(s.N * s.IC, seed++);        // (N, IC)
    const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);    // (OC, IC)
    const std::vector<float> dout = random_normal(s.N * s.OC, seed++);       // (N, OC)
    const std::vector<float> dinp0 = random_normal(s.N * s.IC, seed++);      // (N, IC) prior
    const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);  // (OC, IC) prior
    const std::vector<float> dbias0 = random_normal(s.OC, seed++);           // (OC) prior
    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_dout = to_device(dout);
    auto d_dinp = to_device(dinp0);
    auto d_dweight = to_device(dweight0);
    auto d_dbias = to_device(dbias0);
    kernels().matmul_backward(d_dinp->get(), d_dweight->get(), s.bias ? d_dbias->get() : nullptr,
                              d_dout->get(), d_inp->get(), d_weight->get(), s.N, s.IC, s.OC,
                              kernels::GradWrite::accumulate);

    std::vector<double> dinp(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0), dbias(s.OC, 0.0);
    ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), widen(dout).data(),
                         widen(inp).data(), widen(weight).data(), s.N, s.IC, s.OC);
    expect_close(name("matmul_backward dinp", s), d_dinp->download(), plus(dinp0, dinp), 1e-5);
    expect_close(name("matmul_backward dweight", s), d_dweight->download(), plus(dweight0, dweight),
                 1e-5);
    if (s.bias) {
      expect_close(name("matmul_backward dbias", s), d_dbias->download(), plus(dbias0, dbias),
                   1e-5);
    }
  }
}

// GradWrite::overwrite: dinp is written whole and never read (it starts as NaN here), with the
// values the accumulating form gives from zeros (equal as floats: a zero's sign may differ), while
// dweight and dbias still accumulate into their priors. An empty product (OC 0) zeroes dinp.
TEST_P(MatmulTest, BackwardOverwritesTheInputGradientWhenAsked) {
  uint32_t seed = 650;
  std::vector<MatmulShape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({9, 17, 0, false});
  for (const MatmulShape& s : shapes) {
    const std::vector<float> inp = random_normal(s.N * s.IC, seed++);        // (N, IC)
    const std::vector<float> weight = random_normal(s.OC * s.IC, seed++);    // (OC, IC)
    const std::vector<float> dout = random_normal(s.N * s.OC, seed++);       // (N, OC)
    const std::vector<float> dweight0 = random_normal(s.OC * s.IC, seed++);  // (OC, IC) prior
    const std::vector<float> dbias0 = random_normal(s.OC, seed++);           // (OC) prior
    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_dout = to_device(dout);
    // Overwritten into NaN; accumulated into zeros, the reference form.
    auto d_over = to_device(std::vector<float>(s.N * s.IC, std::nanf("")));  // (N, IC)
    auto d_acc = to_device(std::vector<float>(s.N * s.IC, 0.0f));            // (N, IC)
    auto d_dweight_over = to_device(dweight0), d_dweight_acc = to_device(dweight0);
    auto d_dbias_over = to_device(dbias0), d_dbias_acc = to_device(dbias0);
    kernels().matmul_backward(d_over->get(), d_dweight_over->get(),
                              s.bias ? d_dbias_over->get() : nullptr, d_dout->get(), d_inp->get(),
                              d_weight->get(), s.N, s.IC, s.OC, kernels::GradWrite::overwrite);
    kernels().matmul_backward(d_acc->get(), d_dweight_acc->get(),
                              s.bias ? d_dbias_acc->get() : nullptr, d_dout->get(), d_inp->get(),
                              d_weight->get(), s.N, s.IC, s.OC, kernels::GradWrite::accumulate);
    const std::vector<float> over = d_over->download(), acc = d_acc->download();
    size_t unequal = 0;
    double max_abs = 0.0;
    for (size_t i = 0; i < over.size(); ++i) {
      unequal += !(over[i] == acc[i]);  // NaN (a read of the old value) is unequal too
      max_abs = std::max(max_abs, std::fabs(double{over[i]} - double{acc[i]}));
    }
    std::printf("%s: overwritten vs accumulated into zeros: %zu of %zu unequal, max abs %.3g\n",
                name("matmul_backward dinp", s).c_str(), unequal, over.size(), max_abs);
    EXPECT_EQ(unequal, 0u) << name("dinp", s);
    EXPECT_EQ(d_dweight_over->download(), d_dweight_acc->download()) << name("dweight", s);
    EXPECT_EQ(d_dbias_over->download(), d_dbias_acc->download()) << name("dbias", s);
    if (s.OC == 0) {
      for (float v : over) ASSERT_EQ(v, 0.0f) << name("empty product's dinp", s);
    }
  }
}

// The CPU backend's split of a product into blocks depends on the thread count; every count must
// give the reference result (block edges fall at different columns and rows each time).
TEST(MatmulCpuThreads, ResultDoesNotDependOnThreadCount) {
  const int original_threads = omp_get_max_threads();
  const MatmulShape s{50, 300, 1001, true};
  const std::vector<float> inp = random_normal(s.N * s.IC, 1);      // (N, IC)
  const std::vector<float> weight = random_normal(s.OC * s.IC, 2);  // (OC, IC)
  const std::vector<float> bias = random_normal(s.OC, 3);           // (OC)
  const std::vector<float> dout = random_normal(s.N * s.OC, 4);     // (N, OC)
  std::vector<double> out(s.N * s.OC), dinp(s.N * s.IC, 0.0), dweight(s.OC * s.IC, 0.0),
      dbias(s.OC, 0.0);
  ref::matmul_forward(out.data(), widen(inp).data(), widen(weight).data(), widen(bias).data(), s.N,
                      s.IC, s.OC);
  ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), widen(dout).data(),
                       widen(inp).data(), widen(weight).data(), s.N, s.IC, s.OC);
  for (int threads : {1, 3, 4}) {
    std::unique_ptr<Device> device = make_cpu_device(threads);
    DeviceArray<float> d_inp(*device, inp.size()), d_weight(*device, weight.size()),
        d_bias(*device, bias.size()), d_dout(*device, dout.size()), d_out(*device, out.size()),
        d_dinp(*device, dinp.size()), d_dweight(*device, dweight.size()),
        d_dbias(*device, dbias.size());
    d_inp.upload(inp);
    d_weight.upload(weight);
    d_bias.upload(bias);
    d_dout.upload(dout);
    device->fill_zero(d_dinp.get(), dinp.size() * sizeof(float), device->default_stream());
    device->fill_zero(d_dweight.get(), dweight.size() * sizeof(float), device->default_stream());
    device->fill_zero(d_dbias.get(), dbias.size() * sizeof(float), device->default_stream());
    kernels::Kernels& k = device->kernels();
    k.matmul_forward(d_out.get(), d_inp.get(), d_weight.get(), d_bias.get(), s.N, s.IC, s.OC);
    k.matmul_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_inp.get(),
                      d_weight.get(), s.N, s.IC, s.OC, kernels::GradWrite::accumulate);
    const std::string suffix = " " + std::to_string(threads) + " threads";
    expect_close(name("matmul_forward out", s) + suffix, d_out.download(), out, 1e-5);
    expect_close(name("matmul_backward dinp", s) + suffix, d_dinp.download(), dinp, 1e-5);
    expect_close(name("matmul_backward dweight", s) + suffix, d_dweight.download(), dweight, 1e-5);
    expect_close(name("matmul_backward dbias", s) + suffix, d_dbias.download(), dbias, 1e-5);
  }
  // The CPU device sets the OpenMP thread count of this thread; give the other tests theirs back.
  make_cpu_device(original_threads);
}

}  // namespace
}  // namespace tierzero::test
