// Element-wise kernels (GELU, residual, scale, sum of squares, block transpose) against the double
// reference, on every backend. GELU inputs include the far tails, where 1 +- tanh cancels in naive
// fp32.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::test {
namespace {

class ElementwiseTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(ElementwiseTest);

const size_t kSizes[] = {10007, 1, 64 * 3072};

std::vector<float> gelu_inputs(size_t n, uint32_t seed) {
  std::vector<float> x = random_normal(n, seed, 2.0f);
  const float special[] = {0.0f,  -0.0f, 1e-4f,  -1e-4f, 1.0f,   -1.0f, 5.0f,
                           -5.0f, 10.0f, -10.0f, 30.0f,  -30.0f, 1e4f,  -1e4f};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) x[i] = special[i];
  return x;
}

TEST_P(ElementwiseTest, GeluForwardMatchesReference) {
  uint32_t seed = 900;
  for (size_t n : kSizes) {
    const std::vector<float> inp = gelu_inputs(n, seed++);  // (n)
    auto d_inp = to_device(inp);
    auto d_out = empty<float>(n);  // (n)
    kernels().gelu_forward(d_out->get(), d_inp->get(), n);
    std::vector<double> out(n);
    ref::gelu_forward(out.data(), widen(inp).data(), n);
    // A few fp32 operations and one exp per element.
    expect_close("gelu_forward out n" + std::to_string(n), d_out->download(), out, 1e-6);
  }
}

TEST_P(ElementwiseTest, GeluBackwardAccumulates) {
  uint32_t seed = 1000;
  for (size_t n : kSizes) {
    const std::vector<float> inp = gelu_inputs(n, seed++);      // (n)
    const std::vector<float> dout = random_normal(n, seed++);   // (n)
    const std::vector<float> dinp0 = random_normal(n, seed++);  // (n) prior
    auto d_inp = to_device(inp);
    auto d_dout = to_device(dout);
    auto d_dinp = to_device(dinp0);
    kernels().gelu_backward(d_dinp->get(), d_inp->get(), d_dout->get(), n);
    std::vector<double> dinp(n, 0.0);
    ref::gelu_backward(dinp.data(), widen(inp).data(), widen(dout).data(), n);
    expect_close("gelu_backward dinp n" + std::to_string(n), d_dinp->download(), plus(dinp0, dinp),
                 1e-6);
  }
}

// The CPU's GELU backward into zeros and its in-place form (the fused GELU product's epilogue,
// matmul_backward_gelu) give the same bits, at any thread count: which elements fall in a
// loop's vector body or its scalar tail moves with the thread split, and with multiply-add
// contraction GCC rounded the two differently (1 to 3 elements of 1003 differed at 2 to 4
// threads). n is not a multiple of any vector width.
TEST(ElementwiseCpu, GeluBackwardBitsDoNotDependOnThreadsOrForm) {
  const size_t n = 1003;
  const std::vector<float> inp = gelu_inputs(n, 1100);     // (n)
  const std::vector<float> dout = random_normal(n, 1101);  // (n)
  const int before = kernels::cpu::threads();
  std::vector<float> first;
  for (const int threads : {1, 2, 3, 4}) {
    kernels::cpu::set_threads(threads);
    std::vector<float> into_zeros(n, 0.0f), in_place = dout;  // (n) each
    kernels::cpu::gelu_backward(into_zeros.data(), inp.data(), dout.data(), n);
    kernels::cpu::gelu_backward_in_place(in_place.data(), inp.data(), n);
    size_t forms = 0, threads_differ = 0;
    for (size_t i = 0; i < n; ++i) {
      forms += std::memcmp(&into_zeros[i], &in_place[i], sizeof(float)) != 0;
      if (!first.empty())
        threads_differ += std::memcmp(&into_zeros[i], &first[i], sizeof(float)) != 0;
    }
    std::printf("%d threads: %zu of %zu elements differ between the forms, %zu from 1 thread\n",
                threads, forms, n, threads_differ);
    EXPECT_EQ(forms, 0u) << threads << " threads";
    EXPECT_EQ(threads_differ, 0u) << threads << " threads";
    if (first.empty()) first = into_zeros;
  }
  kernels::cpu::set_threads(before);
}

TEST_P(ElementwiseTest, ResidualForwardAndBackward) {
  uint32_t seed = 1100;
  for (size_t n : kSizes) {
    const std::vector<float> a = random_normal(n, seed++);     // (n)
    const std::vector<float> b = random_normal(n, seed++);     // (n)
    const std::vector<float> dout = random_normal(n, seed++);  // (n)
    const std::vector<float> da0 = random_normal(n, seed++);   // (n) prior
    const std::vector<float> db0 = random_normal(n, seed++);   // (n) prior
    auto d_a = to_device(a);
    auto d_b = to_device(b);
    auto d_out = empty<float>(n);
    kernels().residual_forward(d_out->get(), d_a->get(), d_b->get(), n);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(a[i]) + static_cast<double>(b[i]);
    expect_close("residual_forward out n" + std::to_string(n), d_out->download(), out, 1e-6);

    auto d_dout = to_device(dout);
    auto d_da = to_device(da0);
    auto d_db = to_device(db0);
    kernels().residual_backward(d_da->get(), d_db->get(), d_dout->get(), n);
    expect_close("residual_backward da n" + std::to_string(n), d_da->download(),
                 plus(da0, widen(dout)), 1e-6);
    expect_close("residual_backward db n" + std::to_string(n), d_db->download(),
                 plus(db0, widen(dout)), 1e-6);
  }
}

TEST_P(ElementwiseTest, ScaleMatchesReference) {
  uint32_t seed = 1200;
  for (size_t n : kSizes) {
    const std::vector<float> x = random_normal(n, seed++);  // (n)
    auto d_x = to_device(x);
    const float s = 0.37f;
    kernels().scale(d_x->get(), n, s);
    std::vector<double> ref(n);
    for (size_t i = 0; i < n; ++i) ref[i] = static_cast<double>(x[i]) * static_cast<double>(s);
    expect_close("scale x n" + std::to_string(n), d_x->download(), ref, 1e-6);
  }
}

TEST_P(ElementwiseTest, TransposeBlocksSwapsOuterAxes) {
  // Ulysses' shapes in fp32 and in 16 bits: (B*T_local*3, sp, C/sp) rows and (sp, B, T_local*C)
  // blocks, plus 1-extents and rows whose bytes only 2 or 1 divide (the CUDA kernel's copy unit
  // is the widest of 16, 4, 2 and 1 bytes that divides a row).
  struct Shape {
    size_t X, Y, row_bytes;
  };
  const size_t f = sizeof(float), h = 2;
  for (const Shape& sh : {Shape{2 * 8 * 3, 4, 16 * f}, Shape{4, 2, 8 * 64 * f}, Shape{1, 5, 3 * f},
                          Shape{7, 1, f}, Shape{33, 17, 5 * f}, Shape{2 * 8 * 3, 4, 16 * h},
                          Shape{4, 2, 8 * 64 * h}, Shape{33, 17, 5 * h}, Shape{9, 3, 7}}) {
    const std::vector<float> noise = random_normal(sh.X * sh.Y * sh.row_bytes, 1400);
    std::vector<uint8_t> in(noise.size());  // (X, Y, row_bytes)
    for (size_t i = 0; i < in.size(); ++i) std::memcpy(&in[i], &noise[i], 1);
    auto d_in = to_device(in);
    auto d_out = to_device(std::vector<uint8_t>(in.size(), 0xA5));  // (Y, X, row_bytes)
    kernels().transpose_blocks(d_out->get(), d_in->get(), sh.X, sh.Y, sh.row_bytes);
    const std::vector<uint8_t> out = d_out->download();
    size_t wrong = 0;
    for (size_t x = 0; x < sh.X; ++x)
      for (size_t y = 0; y < sh.Y; ++y)
        wrong += std::memcmp(&out[(y * sh.X + x) * sh.row_bytes],
                             &in[(x * sh.Y + y) * sh.row_bytes], sh.row_bytes) != 0;
    std::printf("transpose_blocks %zux%zu rows of %zu bytes: %zu rows wrong\n", sh.X, sh.Y,
                sh.row_bytes, wrong);
    EXPECT_EQ(wrong, 0u);  // a copy: bit for bit
    // Transposing back restores the input.
    auto d_back = to_device(std::vector<uint8_t>(in.size(), 0x5A));
    kernels().transpose_blocks(d_back->get(), d_out->get(), sh.Y, sh.X, sh.row_bytes);
    EXPECT_EQ(d_back->download(), in);
  }
}

TEST_P(ElementwiseTest, SumSquaresMatchesReference) {
  uint32_t seed = 1300;
  for (size_t n : {size_t{1}, size_t{10007}, size_t{1000003}}) {
    const std::vector<float> x = random_normal(n, seed++, 3.0f);  // (n)
    auto d_x = to_device(x);
    const double got = kernels().sum_squares(d_x->get(), n);
    double ref = 0.0;
    for (float v : x) ref += static_cast<double>(v) * static_cast<double>(v);
    const double abs_err = std::fabs(got - ref);
    const double rel_err = abs_err / ref;
    std::printf("sum_squares n%zu: max_abs %.1e max_rel %.1e (tol 1e-06)\n", n, abs_err, rel_err);
    RecordProperty("sum_squares n" + std::to_string(n) + ".max_rel", std::to_string(rel_err));
    // A backend may sum in fp32 partials; the contract is fp32-level accuracy.
    EXPECT_LE(rel_err, 1e-6);
  }
}

// sum_squares_to leaves the sum in device memory (the step reads every unit's back at once): the
// same bits as sum_squares, for sizes of one partial, several, and more than the partials cap.
TEST_P(ElementwiseTest, SumSquaresToDeviceIsBitwiseSumSquares) {
  uint32_t seed = 1400;
  const std::vector<size_t> sizes = {0, 1, 10007, 1000003, 5 * 1024 * 1024 + 3};
  auto d_sums = empty<double>(sizes.size());  // (sizes) one slot per sum
  std::vector<double> direct;
  std::vector<std::unique_ptr<DeviceArray<float>>> inputs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    inputs.push_back(to_device(random_normal(sizes[i], seed++, 3.0f)));
    direct.push_back(kernels().sum_squares(inputs.back()->get(), sizes[i]));
  }
  for (size_t i = 0; i < sizes.size(); ++i)  // issued together, as the step does
    kernels().sum_squares_to(d_sums->get() + i, inputs[i]->get(), sizes[i]);
  const std::vector<double> got = d_sums->download();
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::printf("sum_squares_to n%zu: %.17g, sum_squares %.17g\n", sizes[i], got[i], direct[i]);
    EXPECT_EQ(got[i], direct[i]) << "n " << sizes[i];
  }
}

}  // namespace
}  // namespace tierzero::test
