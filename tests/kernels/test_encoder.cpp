// Encoder (token + position embedding) kernels against the double reference, on every backend.
// Tokens are drawn from a tiny vocabulary so that the backward scatter-add sees many repeats.
#include <cstdio>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"

namespace tierzero::test {
namespace {

class EncoderTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(EncoderTest);

struct EncoderShape {
  size_t B, T, C, Vp, maxT;
};
const EncoderShape kShapes[] = {
    {2, 7, 48, 5, 9}, {3, 5, 130, 11, 5}, {4, 64, 768, 67, 64}, {1, 1, 1, 2, 1}};

std::string name(const char* what, const EncoderShape& s) {
  return std::string(what) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
         std::to_string(s.C);
}

TEST_P(EncoderTest, ForwardMatchesReference) {
  uint32_t seed = 100;
  for (const EncoderShape& s : kShapes) {
    const std::vector<float> wte = random_normal(s.Vp * s.C, seed++);    // (Vp, C)
    const std::vector<float> wpe = random_normal(s.maxT * s.C, seed++);  // (maxT, C)
    const std::vector<int32_t> tokens =
        random_tokens(s.B * s.T, seed++, static_cast<int32_t>(s.Vp));  // (B, T)
    auto d_wte = to_device(wte);
    auto d_wpe = to_device(wpe);
    auto d_tokens = to_device(tokens);
    auto d_out = empty<float>(s.B * s.T * s.C);  // (B, T, C)
    kernels().encoder_forward(d_out->get(), d_tokens->get(), d_wte->get(), d_wpe->get(), s.B, s.T,
                              s.C);

    std::vector<double> ref(s.B * s.T * s.C);
    ref::encoder_forward(ref.data(), tokens.data(), widen(wte).data(), widen(wpe).data(), s.B, s.T,
                         s.C);
    // One fp32 addition per element.
    expect_close(name("encoder_forward out", s), d_out->download(), ref, 1e-6);
  }
}

TEST_P(EncoderTest, BackwardAccumulates) {
  uint32_t seed = 200;
  for (const EncoderShape& s : kShapes) {
    const std::vector<float> dout = random_normal(s.B * s.T * s.C, seed++);  // (B, T, C)
    const std::vector<int32_t> tokens =
        random_tokens(s.B * s.T, seed++, static_cast<int32_t>(s.Vp));      // (B, T)
    const std::vector<float> dwte0 = random_normal(s.Vp * s.C, seed++);    // (Vp, C) prior grads
    const std::vector<float> dwpe0 = random_normal(s.maxT * s.C, seed++);  // (maxT, C)
    auto d_dout = to_device(dout);
    auto d_tokens = to_device(tokens);
    auto d_dwte = to_device(dwte0);
    auto d_dwpe = to_device(dwpe0);
    kernels().encoder_backward(d_dwte->get(), d_dwpe->get(), d_dout->get(), d_tokens->get(), s.B,
                               s.T, s.C);

    std::vector<double> dwte(s.Vp * s.C, 0.0), dwpe(s.maxT * s.C, 0.0);
    ref::encoder_backward(dwte.data(), dwpe.data(), widen(dout).data(), tokens.data(), s.B, s.T,
                          s.C);
    // Sums of up to B*T fp32 terms onto the prior gradient.
    expect_close(name("encoder_backward dwte", s), d_dwte->download(), plus(dwte0, dwte), 1e-6);
    expect_close(name("encoder_backward dwpe", s), d_dwpe->download(), plus(dwpe0, dwpe), 1e-6);
  }
}

}  // namespace
}  // namespace tierzero::test
