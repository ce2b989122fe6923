// Softmax cross-entropy kernels against the double reference, on every backend: loss only, fused
// loss + gradient into a separate buffer, and fused in place (dlogits == logits). Padding columns
// V..Vp hold large logits, which must be ignored, and the gradient's padding must come out 0.
#include <limits>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class SoftmaxXentTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(SoftmaxXentTest);

struct SoftmaxShape {
  size_t N, V, Vp;
};
const SoftmaxShape kShapes[] = {{5, 50257, 50304}, {7, 13, 16}, {3, 64, 64}, {4, 1, 8}};

std::string name(const char* what, const SoftmaxShape& s) {
  return std::string(what) + " N" + std::to_string(s.N) + " V" + std::to_string(s.V) + " Vp" +
         std::to_string(s.Vp);
}

struct SoftmaxInputs {
  std::vector<float> logits;     // (N, Vp)
  std::vector<int32_t> targets;  // (N)
};

SoftmaxInputs make_inputs(const SoftmaxShape& s, uint32_t seed) {
  SoftmaxInputs in{random_normal(s.N * s.Vp, seed, 2.0f),
                   random_tokens(s.N, seed + 1, static_cast<int32_t>(s.V))};
  for (size_t n = 0; n < s.N; ++n)
    for (size_t i = s.V; i < s.Vp; ++i) in.logits[n * s.Vp + i] = 1e4f;
  // Row 0 has one dominant logit: a kernel that skips the max subtraction overflows here.
  in.logits[s.V / 2] = 90.0f;
  return in;
}

// Probabilities are checked relative to themselves (floor 1e-30): each one, however small, is
// the fp32 exp of an fp32 difference x - max, whose rounding (x up to ~90) costs up to ~1e-6.
constexpr double kGradFloor = 1e-30;

TEST_P(SoftmaxXentTest, ForwardMatchesReference) {
  uint32_t seed = 1400;
  for (const SoftmaxShape& s : kShapes) {
    const SoftmaxInputs in = make_inputs(s, seed);
    seed += 2;
    auto d_logits = to_device(in.logits);
    auto d_targets = to_device(in.targets);
    auto d_losses = empty<float>(s.N);  // (N)
    kernels().softmax_xent_forward(d_losses->get(), d_logits->get(), d_targets->get(), s.N, s.V,
                                   s.Vp);
    std::vector<double> losses(s.N);
    ref::softmax_xent(losses.data(), nullptr, widen(in.logits).data(), in.targets.data(), 0.0, s.N,
                      s.V, s.Vp);
    expect_close(name("softmax_xent_forward losses", s), d_losses->download(), losses, 1e-5);
  }
}

TEST_P(SoftmaxXentTest, ForwardBackwardOutOfPlace) {
  uint32_t seed = 1500;
  for (const SoftmaxShape& s : kShapes) {
    const SoftmaxInputs in = make_inputs(s, seed);
    seed += 2;
    const float dloss = 1.0f / static_cast<float>(s.N);
    auto d_logits = to_device(in.logits);
    auto d_targets = to_device(in.targets);
    auto d_losses = empty<float>(s.N);  // (N)
    // (N, Vp) garbage, including NaN in the padding: all of it must be overwritten.
    std::vector<float> garbage = random_normal(s.N * s.Vp, seed + 7);
    for (size_t n = 0; n < s.N; ++n)
      for (size_t i = s.V; i < s.Vp; ++i)
        garbage[n * s.Vp + i] = std::numeric_limits<float>::quiet_NaN();
    auto d_dlogits = to_device(garbage);
    kernels().softmax_xent_forward_backward(d_dlogits->get(), d_losses->get(), d_logits->get(),
                                            d_targets->get(), dloss, s.N, s.V, s.Vp);

    std::vector<double> losses(s.N), dlogits(s.N * s.Vp);
    ref::softmax_xent(losses.data(), dlogits.data(), widen(in.logits).data(), in.targets.data(),
                      static_cast<double>(dloss), s.N, s.V, s.Vp);
    expect_close(name("softmax_xent_forward_backward losses", s), d_losses->download(), losses,
                 1e-5);
    expect_close(name("softmax_xent_forward_backward dlogits", s), d_dlogits->download(), dlogits,
                 1e-5, kGradFloor * static_cast<double>(dloss));
    // The logits must be untouched when the gradient goes elsewhere.
    expect_close(name("softmax_xent_forward_backward logits kept", s), d_logits->download(),
                 widen(in.logits), 0.0);
  }
}

TEST_P(SoftmaxXentTest, ForwardBackwardInPlace) {
  uint32_t seed = 1600;
  for (const SoftmaxShape& s : kShapes) {
    const SoftmaxInputs in = make_inputs(s, seed);
    seed += 2;
    const float dloss = 1.0f / static_cast<float>(s.N);
    auto d_logits = to_device(in.logits);  // (N, Vp), becomes dlogits
    auto d_targets = to_device(in.targets);
    auto d_losses = empty<float>(s.N);  // (N)
    kernels().softmax_xent_forward_backward(d_logits->get(), d_losses->get(), d_logits->get(),
                                            d_targets->get(), dloss, s.N, s.V, s.Vp);

    std::vector<double> losses(s.N), dlogits(s.N * s.Vp);
    ref::softmax_xent(losses.data(), dlogits.data(), widen(in.logits).data(), in.targets.data(),
                      static_cast<double>(dloss), s.N, s.V, s.Vp);
    expect_close(name("softmax_xent in-place losses", s), d_losses->download(), losses, 1e-5);
    expect_close(name("softmax_xent in-place dlogits", s), d_logits->download(), dlogits, 1e-5,
                 kGradFloor * static_cast<double>(dloss));
  }
}

TEST_P(SoftmaxXentTest, RejectsTargetOutsideVocabulary) {
  if (!is_cpu()) GTEST_SKIP() << "argument errors are thrown by the CPU backend only";
  auto d_logits = to_device(std::vector<float>(2 * 8, 0.0f));
  auto d_targets = to_device(std::vector<int32_t>{3, 6});  // 6 is padding, not vocabulary
  auto d_losses = empty<float>(2);
  EXPECT_THROW(
      kernels().softmax_xent_forward(d_losses->get(), d_logits->get(), d_targets->get(), 2, 5, 8),
      tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
