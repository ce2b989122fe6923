// Gradient accumulation: two half-batches with grad_scale 0.5 give the gradients of the whole
// batch (the accumulating path against the one-shot reference), and evaluate() after
// forward_backward() sees the same loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tierzero/core/random.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;

TEST(GradientAccumulation, TwoHalvesEqualTheWholeBatch) {
  tierzero::testing::TinyGpt g(tierzero::testing::tiny_config(50, 64, 16, 2, 2, 32), 4, 12, 9);
  const size_t B = g.B, T = g.T;
  nn::GPT& model = g.model;
  nn::LocalParams& params = g.params;
  std::vector<int32_t>& x = g.x;
  std::vector<int32_t>& y = g.y;
  params.zero_grads();
  const float whole = model.forward_backward(params, x.data(), y.data(), B, T, 1.0f);
  std::vector<float> reference(params.grads(), params.grads() + params.numel());

  params.zero_grads();
  const size_t half = B / 2 * T;
  const float l1 = model.forward_backward(params, x.data(), y.data(), B / 2, T, 0.5f);
  const float l2 = model.forward_backward(params, x.data() + half, y.data() + half, B / 2, T, 0.5f);
  double max_abs = 0.0, ref_max = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double{params.grads()[i]} - reference[i]));
    ref_max = std::max(ref_max, std::fabs(double{reference[i]}));
  }
  std::printf(
      "accumulated vs whole-batch gradients: max_abs %.2e (max |grad| %.2e); loss %.6f vs "
      "%.6f\n",
      max_abs, ref_max, 0.5 * (l1 + l2), double{whole});
  EXPECT_LT(max_abs, 1e-5 * ref_max);
  EXPECT_NEAR(0.5 * (l1 + l2), whole, 1e-5);
  EXPECT_NEAR(model.evaluate(params, x.data(), y.data(), B, T), whole, 1e-6);
}
