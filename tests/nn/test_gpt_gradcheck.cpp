// Whole-model gradients against central finite differences on a tiny GPT-2 (CPU backend, fp32).
// For each parameter tensor: the directional derivative along a random unit direction, and the
// few entries with the largest gradients, each compared with (L(p + e) - L(p - e)) / 2e.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tierzero/core/random.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;

TEST(GptGradcheck, MatchesCentralFiniteDifferences) {
  tierzero::testing::TinyGpt g(tierzero::testing::tiny_config(29, 32, 8, 2, 2, 16), 2, 6, 3);
  const size_t B = g.B, T = g.T;
  nn::GPT& model = g.model;
  nn::LocalParams& params = g.params;
  std::vector<int32_t>& x = g.x;
  std::vector<int32_t>& y = g.y;
  float* p = params.params();
  // Larger, non-trivial weights than GPT-2's init so every path carries signal.
  Rng rng(11);
  for (const nn::ParamTensor& t : model.layout().tensors())
    for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] += static_cast<float>(0.1 * rng.normal());
  params.zero_grads();
  model.forward_backward(params, x.data(), y.data(), B, T, 1.0f);
  std::vector<float> grad(params.grads(), params.grads() + params.numel());
  auto loss = [&] { return double{model.evaluate(params, x.data(), y.data(), B, T)}; };

  const double eps = 1e-2;
  double worst_dir = 0.0, worst_elem = 0.0;
  for (const nn::ParamTensor& t : model.layout().tensors()) {
    // Directional derivative along a random unit vector u within this tensor.
    std::vector<float> u(t.numel);
    double un = 0.0;
    for (auto& v : u) {
      v = static_cast<float>(rng.normal());
      un += double{v} * v;
    }
    un = std::sqrt(un);
    double analytic = 0.0;
    for (size_t i = 0; i < t.numel; ++i) {
      u[i] = static_cast<float>(u[i] / un);
      analytic += double{grad[t.offset + i]} * u[i];
    }
    std::vector<float> saved(p + t.offset, p + t.offset + t.numel);
    for (size_t i = 0; i < t.numel; ++i)
      p[t.offset + i] = saved[i] + static_cast<float>(eps) * u[i];
    const double lp = loss();
    for (size_t i = 0; i < t.numel; ++i)
      p[t.offset + i] = saved[i] - static_cast<float>(eps) * u[i];
    const double lm = loss();
    std::copy(saved.begin(), saved.end(), p + t.offset);
    const double numeric = (lp - lm) / (2 * eps);
    const double err = std::fabs(numeric - analytic);
    worst_dir = std::max(worst_dir, err);
    std::printf("%-16s directional: analytic %+.6f numeric %+.6f abs err %.2e\n", t.name().c_str(),
                analytic, numeric, err);
    EXPECT_LT(err, 2e-3 + 2e-2 * std::fabs(analytic)) << t.name();

    // The three entries with the largest gradient.
    std::vector<size_t> idx(t.numel);
    std::iota(idx.begin(), idx.end(), 0);
    const size_t k = std::min<size_t>(3, t.numel);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(),
                      [&](size_t a, size_t b) {
                        return std::fabs(grad[t.offset + a]) > std::fabs(grad[t.offset + b]);
                      });
    for (size_t j = 0; j < k; ++j) {
      float& w = p[t.offset + idx[j]];
      const float w0 = w;
      w = w0 + static_cast<float>(eps);
      const double lp1 = loss();
      w = w0 - static_cast<float>(eps);
      const double lm1 = loss();
      w = w0;
      const double num = (lp1 - lm1) / (2 * eps);
      const double ana = grad[t.offset + idx[j]];
      worst_elem = std::max(worst_elem, std::fabs(num - ana));
      EXPECT_LT(std::fabs(num - ana), 2e-3 + 2e-2 * std::fabs(ana))
          << t.name() << "[" << idx[j] << "] analytic " << ana << " numeric " << num;
    }
  }
  std::printf("worst abs error: directional %.2e, single entries %.2e\n", worst_dir, worst_elem);
}
