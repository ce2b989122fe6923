// Causal self-attention kernels against the double reference, on every backend. The backward
// scratch buffer is filled with NaN first: its contents are undefined on entry, so a kernel that
// reads it before writing would fail here.
#include <limits>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class AttentionTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(AttentionTest);

struct AttentionShape {
  size_t B, T, C, NH;
};
const AttentionShape kShapes[] = {
    {2, 7, 48, 4}, {1, 16, 64, 1}, {3, 13, 96, 6}, {2, 64, 768, 12}, {1, 1, 8, 2}};

std::string name(const char* what, const AttentionShape& s) {
  return std::string(what) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
         std::to_string(s.C) + " NH" + std::to_string(s.NH);
}

TEST_P(AttentionTest, ForwardMatchesReference) {
  uint32_t seed = 700;
  for (const AttentionShape& s : kShapes) {
    // Standard deviation 1.5 makes the softmax rows peaked rather than near-uniform.
    const std::vector<float> qkv = random_normal(s.B * s.T * 3 * s.C, seed++, 1.5f);  // (B,T,3C)
    auto d_qkv = to_device(qkv);
    auto d_out = empty<float>(s.B * s.T * s.C);  // (B, T, C)
    // (B, NH, T, T), garbage: the zeros above the diagonal must be written
    auto d_att = to_device(random_normal(s.B * s.NH * s.T * s.T, seed++));
    kernels().attention_forward(d_out->get(), d_att->get(), d_qkv->get(), s.B, s.T, s.C, s.NH);

    std::vector<double> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    ref::attention_forward(out.data(), att.data(), widen(qkv).data(), s.B, s.T, s.C, s.NH);
    // fp32 dot products over hs and sums over T.
    expect_close(name("attention_forward out", s), d_out->download(), out, 1e-5);
    expect_close(name("attention_forward att", s), d_att->download(), att, 1e-5);
  }
}

TEST_P(AttentionTest, BackwardAccumulates) {
  uint32_t seed = 800;
  for (const AttentionShape& s : kShapes) {
    const size_t n_qkv = s.B * s.T * 3 * s.C;
    const std::vector<float> qkv = random_normal(n_qkv, seed++, 1.5f);       // (B, T, 3C)
    const std::vector<float> dout = random_normal(s.B * s.T * s.C, seed++);  // (B, T, C)
    const std::vector<float> dqkv0 = random_normal(n_qkv, seed++);           // (B, T, 3C) prior
    std::vector<double> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    ref::attention_forward(out.data(), att.data(), widen(qkv).data(), s.B, s.T, s.C, s.NH);

    auto d_qkv = to_device(qkv);
    auto d_dout = to_device(dout);
    auto d_att = to_device(narrow(att));  // as the forward saved it
    auto d_dqkv = to_device(dqkv0);
    auto d_datt = to_device(
        std::vector<float>(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN()));
    kernels().attention_backward(d_dqkv->get(), d_datt->get(), d_dout->get(), d_qkv->get(),
                                 d_att->get(), s.B, s.T, s.C, s.NH);

    std::vector<double> dqkv(n_qkv, 0.0);
    ref::attention_backward(dqkv.data(), widen(dout).data(), widen(qkv).data(), s.B, s.T, s.C,
                            s.NH);
    expect_close(name("attention_backward dqkv", s), d_dqkv->download(), plus(dqkv0, dqkv), 1e-5);
  }
}

TEST_P(AttentionTest, RejectsHeadCountThatDoesNotDivideChannels) {
  if (!is_cpu()) GTEST_SKIP() << "argument errors are thrown by the CPU backend only";
  auto d_qkv = to_device(std::vector<float>(3 * 10, 0.0f));
  auto d_out = empty<float>(10);
  auto d_att = empty<float>(3);
  EXPECT_THROW(kernels().attention_forward(d_out->get(), d_att->get(), d_qkv->get(), 1, 1, 10, 3),
               tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
