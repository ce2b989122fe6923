// Checks the double reference kernels themselves: every reference backward must equal central
// finite differences of the reference forward (in double, on small problems), so that the kernel
// tests compare against gradients that are right, not merely consistent with the kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "reference_kernels.hpp"

namespace tierzero::test {
namespace {

std::vector<double> normal(size_t n, uint32_t seed, double stddev = 1.0, double mean = 0.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<double> x(n);
  for (double& v : x) v = dist(rng);
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic with the central difference of loss() with respect to every element of x.
void expect_matches_finite_differences(const std::string& label, std::vector<double>& x,
                                       const std::vector<double>& analytic,
                                       const std::function<double()>& loss) {
  const double h = 1e-5;
  double max_abs = 0.0;
  double max_rel = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    const double diff = std::fabs(numeric - analytic[i]);
    max_abs = std::max(max_abs, diff);
    max_rel = std::max(max_rel, diff / (std::fabs(numeric) + 1e-3));
  }
  std::printf("reference %s vs finite differences: max_abs %.1e max_rel %.1e (tol 1e-06)\n",
              label.c_str(), max_abs, max_rel);
  // Central differences with h = 1e-5 are accurate to ~1e-10 relative plus roundoff ~1e-11/h.
  EXPECT_LE(max_rel, 1e-6) << label;
}

TEST(ReferenceKernels, LayerNormBackwardIsTheGradient) {
  const size_t N = 3, C = 7;
  std::vector<double> inp = normal(N * C, 1, 2.0, 3.0), w = normal(C, 2, 0.2, 1.0),
                      b = normal(C, 3), r = normal(N * C, 4);
  std::vector<double> dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C);
  auto loss = [&] {
    std::vector<double> out(N * C), mean(N), rstd(N);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
    return dot(out, r);
  };
  expect_matches_finite_differences("layernorm dinp", inp, dinp, loss);
  expect_matches_finite_differences("layernorm dweight", w, dw, loss);
  expect_matches_finite_differences("layernorm dbias", b, db, loss);
}

TEST(ReferenceKernels, MatmulBackwardIsTheGradient) {
  const size_t N = 3, IC = 4, OC = 5;
  std::vector<double> inp = normal(N * IC, 5), w = normal(OC * IC, 6), b = normal(OC, 7),
                      r = normal(N * OC, 8);
  std::vector<double> dinp(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  ref::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, IC,
                       OC);
  auto loss = [&] {
    std::vector<double> out(N * OC);
    ref::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
    return dot(out, r);
  };
  expect_matches_finite_differences("matmul dinp", inp, dinp, loss);
  expect_matches_finite_differences("matmul dweight", w, dw, loss);
  expect_matches_finite_differences("matmul dbias", b, db, loss);
}

TEST(ReferenceKernels, AttentionBackwardIsTheGradient) {
  const size_t B = 2, T = 4, C = 6, NH = 2;
  std::vector<double> qkv = normal(B * T * 3 * C, 9, 1.5), r = normal(B * T * C, 10);
  std::vector<double> dqkv(B * T * 3 * C, 0.0);
  ref::attention_backward(dqkv.data(), r.data(), qkv.data(), B, T, C, NH);
  auto loss = [&] {
    std::vector<double> out(B * T * C), att(B * NH * T * T);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, r);
  };
  expect_matches_finite_differences("attention dqkv", qkv, dqkv, loss);
}

TEST(ReferenceKernels, GeluBackwardIsTheGradient) {
  const size_t n = 25;
  std::vector<double> x = normal(n, 11, 3.0), r = normal(n, 12);
  std::vector<double> dx(n, 0.0);
  ref::gelu_backward(dx.data(), x.data(), r.data(), n);
  auto loss = [&] {
    std::vector<double> out(n);
    ref::gelu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  expect_matches_finite_differences("gelu dinp", x, dx, loss);
}

TEST(ReferenceKernels, SoftmaxXentGradientIsTheGradient) {
  const size_t N = 3, V = 7, Vp = 9;
  std::vector<double> logits = normal(N * Vp, 13, 2.0);
  const std::vector<int32_t> targets = {0, 6, 3};
  const double dloss = 1.0 / 3.0;
  std::vector<double> losses(N), dlogits(N * Vp);
  ref::softmax_xent(losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V, Vp);
  auto loss = [&] {
    std::vector<double> l(N);
    ref::softmax_xent(l.data(), nullptr, logits.data(), targets.data(), 0.0, N, V, Vp);
    return dloss * (l[0] + l[1] + l[2]);
  };
  expect_matches_finite_differences("softmax_xent dlogits", logits, dlogits, loss);
}

}  // namespace
}  // namespace tierzero::test
